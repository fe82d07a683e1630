"""Access tokens for the Google APIs: Application Default Credentials through ``google-auth``.

``google.auth.default()`` finds the credentials as every Google client does: ``GOOGLE_APPLICATION_CREDENTIALS``
(a service-account key or an external-account file), the gcloud user's credentials, or the metadata server —
on GKE with Workload Identity, the ``gke-metadata-server`` answering for the pod's Kubernetes service account
(and the Google service account its ``iam.gke.io/gcp-service-account`` annotation names). google-auth's token
refresh is blocking HTTP, so it runs in a worker thread, never on the event loop; tokens are refreshed when
google-auth says they are about to expire (it keeps a margin of a few minutes) or when an API answered 401.

Tests against the fake control plane reach its metadata server through ``GCE_METADATA_HOST`` and
``GCE_METADATA_IP``, which google-auth reads when it is first imported (so in a process of its own).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


class TokenSource(Protocol):
    async def token(self) -> str:
        """A valid access token (refreshed first if it is missing or about to expire)."""
        ...

    def invalidate(self) -> None:
        """The API refused the last token: the next :meth:`token` fetches a new one."""
        ...


class GoogleAuthTokens:
    """Application Default Credentials (see the module docstring)."""

    def __init__(self) -> None:
        self._credentials: Any = None
        self._request: Any = None
        self._stale = False
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        async with self._lock:
            if self._credentials is None:
                self._credentials, self._request = await asyncio.to_thread(_load)
            if self._stale or not self._credentials.valid:
                await asyncio.to_thread(self._credentials.refresh, self._request)
                self._stale = False
            return str(self._credentials.token)

    def invalidate(self) -> None:
        self._stale = True


def _load() -> tuple[Any, Any]:
    # Imported here: loading google-auth costs time and memory a simulated run does not need.
    import google.auth  # noqa: PLC0415
    from google.auth.transport.requests import Request  # noqa: PLC0415

    request = Request()
    credentials, _ = google.auth.default(scopes=list(SCOPES), request=request)
    return credentials, request


class StaticToken:
    """A fixed token, for tests of the provider on their own."""

    def __init__(self, value: str) -> None:
        self.value = value

    async def token(self) -> str:
        return self.value

    def invalidate(self) -> None:
        return None
