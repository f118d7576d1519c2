"""``python -m bench gateway_probe`` asks with a token the gateway accepts: a refused token
(401 for both runs, identical answers) measured nothing, and its exit status says so."""

from __future__ import annotations

from bench.gateway import probe_settings, token
from symfonic_stream.config import Settings
from symfonic_stream.gateway.auth import TokenCheck


def test_the_probes_token_is_one_its_gateway_accepts() -> None:
    settings = Settings(topic_prefix="p").model_copy(update=probe_settings(0.5))
    check = TokenCheck.from_settings(settings)
    assert check is not None
    assert check.claims(token("globex"))["tenant"] == "globex"
