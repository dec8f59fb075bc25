"""API errors: an HTTP status and OpenAI's error body, `{"error": {message, type, param, code}}`.

Handlers raise `APIError`; the app turns it into a JSON response (serve/app.py). `type` is
OpenAI's: invalid_request_error (400, 404), authentication_error (401), rate_limit_error (429),
server_error (5xx).
"""

from __future__ import annotations

from typing import Any

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        kind = TYPES.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        }
