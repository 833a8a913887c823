"""Catalogs as untrusted input: which key may go where (issue 14).

Before: a shared catalog could send any environment variable (``key_env = "LEAKME_SECRET"``)
or the first line of any file (``key_file = "/etc/passwd"``) as the bearer token to any
base_url, plain http to a remote host included; a relative key_file resolved against the
working folder; the missing-key error did not name the tier.
"""

from __future__ import annotations

import pytest

from benchclaw.errors import ProviderConfigError
from benchclaw.providers import make_provider
from benchclaw.providers.catalog import load_catalog


def catalog(tmp_path, tier_lines: str, name: str = "shared", extra: str = "") -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'v = 1\nname = "{name}"\n{extra}\n[tiers.t]\nprovider = "openai"\nmodel = "m"\n'
                    f'prices = {{ input = "1", output = "1" }}\n{tier_lines}\n')
    return str(path)


def provider_for(path: str, tier: str = "t"):
    return make_provider(load_catalog(path).tier(tier))


@pytest.mark.parametrize("lines, says", [
    ('base_url = "https://evil.example/v1"\nkey_env = "LEAKME_SECRET"', "not a key variable"),
    ('base_url = "https://evil.example/v1"\nkey_env = "OPENAI_API_KEY"', "only be sent to api.openai.com"),
    ('base_url = "https://evil.example/v1"\nkey_file = "/etc/passwd"', "not a *.key file"),
    ('base_url = "http://evil.example/v1"\nkey_env = "BENCHCLAW_TEST_KEY"', "plain HTTP"),
])
def test_a_catalog_cannot_send_what_it_likes_where_it_likes(tmp_path, monkeypatch, lines, says):
    monkeypatch.setenv("LEAKME_SECRET", "s3cr3t-value-123")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-value-123")
    monkeypatch.setenv("BENCHCLAW_TEST_KEY", "sk-test-value-456")
    with pytest.raises(ProviderConfigError, match=r"tier 't'.*" + says.replace("*", r"\*")) as e:
        provider_for(catalog(tmp_path, lines))
    assert "s3cr3t" not in str(e.value) and "root:" not in str(e.value)


def test_what_the_user_allows_goes_through(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-value-123")
    monkeypatch.setenv("MY_VLLM_TOKEN", "tok-123456789")
    monkeypatch.setenv("BENCHCLAW_KEY_ENVS", "MY_VLLM_TOKEN")
    provider_for(catalog(tmp_path, 'base_url = "https://api.openai.com/v1"\nkey_env = "OPENAI_API_KEY"', "a"))
    provider_for(catalog(tmp_path, 'base_url = "https://gpu.example/v1"\nkey_env = "MY_VLLM_TOKEN"', "b"))
    provider_for(catalog(tmp_path, 'base_url = "http://10.0.0.7/v1"\nkey_env = "MY_VLLM_TOKEN"\n'
                                   'allow_http = true', "c"))
    provider_for(catalog(tmp_path, 'base_url = "http://127.0.0.1:8000/v1"\nkey_env = "MY_VLLM_TOKEN"', "d"))


def test_a_relative_key_file_resolves_against_the_catalog_folder(tmp_path, monkeypatch):
    folder = tmp_path / "catalogs"
    folder.mkdir()
    (folder / "team.key").write_text("sk-from-the-catalog-folder\n")
    monkeypatch.chdir(tmp_path)  # not the catalog's folder
    prov = provider_for(catalog(folder, 'base_url = "https://api.example/v1"\nkey_file = "team.key"'))
    assert prov._key.reveal() == "sk-from-the-catalog-folder"


def test_an_extending_catalog_cannot_move_a_key_to_another_host(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHCLAW_TEST_KEY", "sk-test-value-456")
    base = catalog(tmp_path, 'base_url = "https://api.example/v1"\nkey_env = "BENCHCLAW_TEST_KEY"', "base")
    moved = tmp_path / "moved.toml"
    moved.write_text(f'v = 1\nname = "moved"\nextends = "{base}"\n[tiers.t]\nbase_url = "https://evil.example/v1"\n')
    with pytest.raises(ProviderConfigError, match="tier 't'.*named for host 'api.example'"):
        provider_for(str(moved))
    renamed = tmp_path / "renamed.toml"
    renamed.write_text(f'v = 1\nname = "renamed"\nextends = "{base}"\n[tiers.t]\n'
                       'base_url = "https://mine.example/v1"\nkey_env = "BENCHCLAW_TEST_KEY"\n')
    provider_for(str(renamed))  # named again next to the new host: the user's own choice


def test_a_missing_key_names_the_tier(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCHCLAW_TEST_KEY", raising=False)
    with pytest.raises(ProviderConfigError, match="tier 't': environment variable BENCHCLAW_TEST_KEY is not set"):
        provider_for(catalog(tmp_path, 'base_url = "https://api.example/v1"\nkey_env = "BENCHCLAW_TEST_KEY"'))
