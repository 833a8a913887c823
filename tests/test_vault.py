"""The key vault: a key planted anywhere a provider speaks never comes out."""

import copy
import logging
import pickle

import pytest

from benchclaw.errors import ProviderConfigError
from benchclaw.providers.vault import REDACTED, Secret, install_log_redaction, load_key, redact

KEY = "sk-planted-Zq8fT3xKp0LmV9wRb2Yc"


def test_secret_never_prints_its_value():
    s = Secret(KEY, label="NEBIUS_API_KEY")
    for text in (repr(s), str(s), f"{s}", f"{s!r:>80}", "%s" % s, str([s]), str({"k": s})):
        assert KEY not in text and "NEBIUS_API_KEY" in text
    assert s.reveal() == KEY
    assert KEY.encode() not in s._masked
    for op in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError):
            op(s)


def test_redact_whole_and_partial_echoes():
    s = Secret(KEY)
    text = (f"Incorrect API key provided: {KEY}. Header was 'Bearer {KEY}'. "
            f"Your key starts with {KEY[:12]}… and ends {KEY[-9:]}")
    out = redact(text)
    assert KEY not in out and KEY[:12] not in out and KEY[-9:] not in out
    assert redact(text, keys=[KEY]).count(REDACTED) == 4
    assert redact("nothing secret here, sk-") == "nothing secret here, sk-"
    del s


def test_env_and_file_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCHCLAW_TEST_KEY", raising=False)
    with pytest.raises(ProviderConfigError, match="BENCHCLAW_TEST_KEY is not set") as e:
        load_key("BENCHCLAW_TEST_KEY")
    monkeypatch.setenv("BENCHCLAW_TEST_KEY", KEY + "\n")
    assert load_key("BENCHCLAW_TEST_KEY").reveal() == KEY
    f = tmp_path / "key.txt"
    f.write_text(KEY + "\n")
    assert load_key("UNUSED", str(f)).reveal() == KEY
    assert load_key(None) is None
    with pytest.raises(ProviderConfigError, match="cannot read"):
        load_key(None, str(tmp_path / "missing"))


def test_log_lines_of_the_sdk_are_redacted(caplog):
    s = Secret(KEY)
    install_log_redaction()
    with caplog.at_level(logging.DEBUG, logger="openai"):
        logging.getLogger("openai").debug("Request options: %s", {"headers": {"Authorization": f"Bearer {KEY}"}})
    assert caplog.records and all(KEY not in r.getMessage() for r in caplog.records)
    assert KEY not in caplog.text
    del s
