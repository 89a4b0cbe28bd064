"""MLflow's error shape: ``{"error_code": ..., "message": ...}`` with the HTTP status MLflow gives
that code (mlflow/exceptions.py). 4xx where MLflow answers 4xx matters: the client retries 5xx and
429 with backoff, so a wrong 5xx would make a client hang instead of failing."""

from __future__ import annotations

import json

from django.http import HttpResponse

INVALID_PARAMETER_VALUE = "INVALID_PARAMETER_VALUE"
RESOURCE_DOES_NOT_EXIST = "RESOURCE_DOES_NOT_EXIST"
RESOURCE_ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"
ENDPOINT_NOT_FOUND = "ENDPOINT_NOT_FOUND"
PERMISSION_DENIED = "PERMISSION_DENIED"
UNAUTHENTICATED = "UNAUTHENTICATED"
BAD_REQUEST = "BAD_REQUEST"
REQUEST_LIMIT_EXCEEDED = "REQUEST_LIMIT_EXCEEDED"
INTERNAL_ERROR = "INTERNAL_ERROR"

HTTP_STATUS = {
    INVALID_PARAMETER_VALUE: 400,
    RESOURCE_ALREADY_EXISTS: 400,
    BAD_REQUEST: 400,
    UNAUTHENTICATED: 401,
    PERMISSION_DENIED: 403,
    RESOURCE_DOES_NOT_EXIST: 404,
    ENDPOINT_NOT_FOUND: 404,
    REQUEST_LIMIT_EXCEEDED: 429,
    INTERNAL_ERROR: 500,
}


class MlflowError(Exception):
    def __init__(self, message: str, error_code: str = INVALID_PARAMETER_VALUE) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = error_code

    def response(self) -> HttpResponse:
        body = json.dumps({"error_code": self.error_code, "message": self.message})
        response = HttpResponse(body, status=HTTP_STATUS[self.error_code], content_type="application/json")
        if self.error_code == UNAUTHENTICATED:
            response["WWW-Authenticate"] = "Bearer"
        if self.error_code == REQUEST_LIMIT_EXCEEDED:
            from webapp.accounts.throttle import retry_after_s

            response["Retry-After"] = str(retry_after_s())
        return response


def invalid(message: str) -> MlflowError:
    return MlflowError(message, INVALID_PARAMETER_VALUE)


def not_found(message: str) -> MlflowError:
    return MlflowError(message, RESOURCE_DOES_NOT_EXIST)
