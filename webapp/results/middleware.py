"""Request bodies sent with ``Content-Encoding: gzip`` (the trainer's HttpReporter does), unpacked
before any view reads them. Only for the API, and with limits on both sizes: a small gzip body can
unpack to gigabytes."""

from __future__ import annotations

import zlib
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

API_PREFIX = "/api/"
MAX_COMPRESSED_BYTES = 64 * 1024 * 1024
MAX_UNPACKED_BYTES = 512 * 1024 * 1024


class GzipRequestMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (
            request.path.startswith(API_PREFIX)
            and request.headers.get("Content-Encoding", "").lower() == "gzip"
        ):
            error = _unpack(request)
            if error is not None:
                return error
        return self.get_response(request)


def _unpack(request: HttpRequest) -> HttpResponse | None:
    length = int(request.headers.get("Content-Length") or 0)
    if length > MAX_COMPRESSED_BYTES:
        return JsonResponse({"error": f"body larger than {MAX_COMPRESSED_BYTES} bytes"}, status=413)
    # read() rather than .body: the compressed size is checked above against our own limit, not
    # DATA_UPLOAD_MAX_MEMORY_SIZE, which is sized for forms.
    packed = request.read()
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(packed, MAX_UNPACKED_BYTES)
    except zlib.error as error:
        return JsonResponse({"error": f"the gzip body does not unpack: {error}"}, status=400)
    if inflater.unconsumed_tail:
        return JsonResponse({"error": f"body unpacks to more than {MAX_UNPACKED_BYTES} bytes"}, status=413)
    request._body = body
    request.META["CONTENT_LENGTH"] = str(len(body))
    del request.META["HTTP_CONTENT_ENCODING"]
    return None
