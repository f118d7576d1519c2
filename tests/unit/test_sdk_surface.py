"""The SDKs' public surface: ``symfonic_stream.sdk`` exports the publisher, the reader and the
reviewer with their records and exceptions; the three default their settings alike; none
holds a Kafka client before it is entered. No broker (the clients' life against one is in
tests/integration/test_docs_snippets_live.py)."""

from __future__ import annotations

import gc
import inspect
import warnings

import pytest

import symfonic_stream.sdk as sdk
from symfonic_stream.sdk import publisher, reader, resumes, reviewer


def test_the_package_exports_every_public_name_of_the_four_modules() -> None:
    for module in (publisher, resumes, reader, reviewer):
        assert set(module.__all__) <= set(sdk.__all__), module.__name__
    assert {"EventPublisher", "RunReader", "Reviewer", "KafkaUnavailable", "ConfigError"} <= set(
        sdk.__all__)
    for name in sdk.__all__:
        assert getattr(sdk, name) is not None
    assert sorted(sdk.__all__) == sdk.__all__


def test_every_exported_exception_is_named_in_the_package_docstring() -> None:
    exceptions = [name for name in sdk.__all__
                  if inspect.isclass(getattr(sdk, name))
                  and issubclass(getattr(sdk, name), BaseException)]
    assert len(exceptions) >= 8
    for name in exceptions:
        assert f":class:`{name}`" in (sdk.__doc__ or ""), name


def test_the_three_take_settings_last_and_default_them_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for cls in (sdk.EventPublisher, sdk.RunReader, sdk.Reviewer):
        settings = inspect.signature(cls).parameters["settings"]
        assert settings.default is None, cls.__name__
    monkeypatch.setenv("SYMFONIC_TOPIC_PREFIX", "acme")
    assert sdk.EventPublisher().topic == "acme.agent-events"
    assert sdk.RunReader("run-1").topic == "acme.stream-events"
    assert sdk.Reviewer("acme-review.t.ui")._names.resumes == "acme.resumes"
    monkeypatch.setenv("SYMFONIC_PARTITIONS", "none")
    for make in (sdk.EventPublisher, lambda: sdk.RunReader("r"), lambda: sdk.Reviewer("g")):
        with pytest.raises(sdk.ConfigError, match="SYMFONIC_PARTITIONS"):
            make()


async def test_none_holds_a_client_before_it_is_entered() -> None:
    """A client made and never started warns "Unclosed ..." when collected: what a failed
    start used to leave behind."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = [sdk.EventPublisher(), sdk.RunReader("run-1"), sdk.Reviewer("group")]
        await made[0].close()
        await made[1].close()
        await made[2].close()
        del made
        gc.collect()
    assert [str(w.message) for w in caught if "Unclosed" in str(w.message)] == []
