"""The GCE metadata server, as much of it as Google client libraries use to get a token and the project.

google-auth detects GCE by ``GET http://$GCE_METADATA_IP/`` answered with header ``Metadata-Flavor: Google``, then
reads ``instance/service-accounts/default/?recursive=true`` and ``…/default/token``. Every answer carries
``Metadata-Flavor: Google``; every ``/computeMetadata/`` request must send it (403 otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

FLAVOR = "Metadata-Flavor"
GOOGLE = "Google"
PREFIX = "/computeMetadata"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform", "https://www.googleapis.com/auth/userinfo.email"]


def is_metadata_path(path: str) -> bool:
    return path in ("/", PREFIX) or path.startswith(PREFIX + "/")


class Metadata:
    def __init__(self, project: str, project_number: str, email: str, issue: Callable[[], tuple[str, float]]) -> None:
        self.project = project
        self.project_number = project_number
        self.email = email
        #: Issues a token: ``(access_token, expires_in)``.
        self.issue = issue

    def handle(self, request: web.Request) -> web.Response:
        path = request.path
        if path == "/":
            return self._text("computeMetadata/\n")
        if request.headers.get(FLAVOR) != GOOGLE:
            return self._text(f"Your client does not have permission to get URL {path} from this server. Missing "
                              "Metadata-Flavor:Google header.\n", status=403)
        if request.headers.get("X-Forwarded-For"):
            return self._text("Metadata requests through a proxy are refused.\n", status=403)
        accounts = "/computeMetadata/v1/instance/service-accounts/"
        if path in ("/computeMetadata", "/computeMetadata/"):
            return self._text("v1/\n")
        if path == "/computeMetadata/v1/":
            return self._text("instance/\noauth/\nproject/\n")
        if path == "/computeMetadata/v1/project/project-id":
            return self._text(self.project)
        if path == "/computeMetadata/v1/project/numeric-project-id":
            return self._text(self.project_number)
        if path == accounts:
            return self._text(f"default/\n{self.email}/\n")
        for alias in ("default", self.email):
            base = f"{accounts}{alias}/"
            if path == base:
                if request.query.get("recursive", "").lower() == "true":
                    return self._json({"aliases": ["default"], "email": self.email, "scopes": SCOPES})
                return self._text("aliases\nemail\nidentity\nscopes\ntoken\n")
            if path == f"{base}email":
                return self._text(self.email)
            if path == f"{base}scopes":
                return self._text("".join(f"{scope}\n" for scope in SCOPES))
            if path == f"{base}token":
                token, expires_in = self.issue()
                return self._json({"access_token": token, "expires_in": int(expires_in), "token_type": "Bearer"})
        return self._text(f"The requested URL {path} was not found on this server.\n", status=404)

    def _text(self, body: str, status: int = 200) -> web.Response:
        return web.Response(status=status, text=body, content_type="application/text",
                            headers={FLAVOR: GOOGLE, "Server": "Metadata Server for VM"})

    def _json(self, body: dict[str, Any]) -> web.Response:
        return web.Response(status=200, text=json.dumps(body), content_type="application/json",
                            headers={FLAVOR: GOOGLE, "Server": "Metadata Server for VM"})
