"""The API client decides its proxy once, from the environment as client-go does, instead of per request."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from gangscale.kube.client import resolve_proxy_once

PROXY = "http://proxy.corp.example:3128"


@pytest.mark.parametrize(("env", "host", "preset", "want"), [
    pytest.param({}, "https://10.0.0.1:6443", None, None, id="no-proxy-configured"),
    pytest.param({"HTTPS_PROXY": PROXY}, "https://10.0.0.1:6443", None, PROXY, id="https-proxy"),
    pytest.param({"HTTP_PROXY": PROXY}, "https://10.0.0.1:6443", None, None, id="http-proxy-not-for-https"),
    pytest.param({"HTTP_PROXY": PROXY}, "http://127.0.0.1:8080", None, PROXY, id="http-proxy-for-http"),
    pytest.param({"HTTPS_PROXY": PROXY, "NO_PROXY": "10.0.0.1"}, "https://10.0.0.1:6443", None, None,
                 id="no-proxy-names-the-host"),
    pytest.param({"HTTPS_PROXY": PROXY, "NO_PROXY": ".svc,.cluster.local"},
                 "https://kubernetes.default.svc:443", None, None, id="no-proxy-domain-suffix"),
    pytest.param({"HTTPS_PROXY": PROXY}, "https://10.0.0.1:6443", "http://kubeconfig-proxy:8888",
                 "http://kubeconfig-proxy:8888", id="kubeconfig-proxy-url-wins"),
])
async def test_the_proxy_comes_from_the_environment_once(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                                        host: str, preset: str | None, want: str | None) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cfg = Configuration(host=host)
    cfg.proxy = preset
    api = ApiClient(configuration=cfg)
    try:
        resolve_proxy_once(api, cfg)
        assert api.rest_client.proxy == want
        # No per-request look-ups of netrc or the proxy environment in worker threads.
        assert api.rest_client.pool_manager.trust_env is False
    finally:
        await api.close()
