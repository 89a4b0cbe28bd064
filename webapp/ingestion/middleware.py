"""Request bodies of the JSON API, read before any view does, with limits of our own: a plain body
up to ``MAX_COMPRESSED_BYTES``; one sent with ``Content-Encoding: gzip`` (the trainer's HttpReporter
does) unpacked, up to ``MAX_UNPACKED_BYTES`` (a small gzip body can unpack to gigabytes). Too large
is a 413 in the API's error shape that says the limit (docs/security.md#errors), rather than Django's
bare 400 at DATA_UPLOAD_MAX_MEMORY_SIZE, which is sized for HTML forms."""

from __future__ import annotations

import zlib
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from webapp.api import error_body
from webapp.middleware import API_PREFIX

MAX_COMPRESSED_BYTES = 64 * 1024 * 1024
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
_BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")


class GzipRequestMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(API_PREFIX) and request.method in _BODY_METHODS:
            error = _read_body(request)
            if error is not None:
                return error
        return self.get_response(request)


def _refuse(message: str, status: int) -> JsonResponse:
    return JsonResponse(error_body(message, status), status=status)


def _read_body(request: HttpRequest) -> HttpResponse | None:
    try:
        length = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        return _refuse("the Content-Length header is not a number", 400)
    if length > MAX_COMPRESSED_BYTES:
        return _refuse(f"the body is {length} bytes; the API takes at most {MAX_COMPRESSED_BYTES}", 413)
    # read() rather than .body: the size is checked against our own limit, not
    # DATA_UPLOAD_MAX_MEMORY_SIZE; one byte more than the limit tells a body that lied about its length.
    data = request.read(MAX_COMPRESSED_BYTES + 1)
    if len(data) > MAX_COMPRESSED_BYTES:
        return _refuse(f"the body is larger than the API's limit of {MAX_COMPRESSED_BYTES} bytes", 413)
    if request.headers.get("Content-Encoding", "").lower() == "gzip":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = inflater.decompress(data, MAX_UNPACKED_BYTES)
        except zlib.error as error:
            return _refuse(f"the gzip body does not unpack: {error}", 400)
        if inflater.unconsumed_tail:
            return _refuse(f"the body unpacks to more than {MAX_UNPACKED_BYTES} bytes", 413)
        del request.META["HTTP_CONTENT_ENCODING"]
    request._body = data
    request.META["CONTENT_LENGTH"] = str(len(data))
    return None
