"""Client factory: an ``ApiClient`` from a kubeconfig file or from the in-cluster service account.

Order, as kubectl and client-go resolve it: an explicit ``--kubeconfig`` path, then ``$KUBECONFIG``,
then in-cluster configuration (``KUBERNETES_SERVICE_HOST`` and the mounted token), then
``~/.kube/config``.
"""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from pathlib import Path

from kubernetes_asyncio import config as kconfig
from kubernetes_asyncio.client import ApiClient, Configuration

from gangscale.kube.transport import KubeHTTP


async def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> Configuration:
    cfg = Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        await kconfig.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        return cfg
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kconfig.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        return cfg
    default = Path.home() / ".kube" / "config"
    if default.exists():
        await kconfig.load_kube_config(config_file=str(default), context=context, client_configuration=cfg)
        return cfg
    raise RuntimeError("no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, or run in a cluster")


async def make_http(kubeconfig: str | None = None, context: str | None = None,
                    user_agent: str = "gangscale") -> KubeHTTP:
    cfg = await load_configuration(kubeconfig, context)
    api = ApiClient(configuration=cfg)
    api.user_agent = user_agent
    resolve_proxy_once(api, cfg)
    return KubeHTTP(api)


def resolve_proxy_once(api: ApiClient, cfg: Configuration) -> None:
    """Honour ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` for the API server as client-go does, but decide it once.

    kubernetes_asyncio opens its aiohttp session with ``trust_env=True``, which makes aiohttp look up netrc and
    the proxy environment in a worker thread on every request: two thread hops per API call, a fifth of the
    controller's time under a burst. The API server is one fixed host, so the answer never changes; a kubeconfig's
    own ``proxy-url`` (``cfg.proxy``) still wins. netrc credentials are not used (client-go ignores netrc too).
    """
    rest = api.rest_client
    if cfg.proxy is None:
        url = urllib.parse.urlsplit(str(cfg.host))
        proxy = urllib.request.getproxies().get(url.scheme or "https")
        if proxy and url.hostname and not urllib.request.proxy_bypass(url.hostname):
            rest.proxy = proxy
    # aiohttp reads this attribute per request; it has no public setter.
    rest.pool_manager._trust_env = False
