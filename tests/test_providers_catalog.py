"""Tier catalogs: shipped files, user overrides, unknown prices, digests."""

import hashlib
from decimal import Decimal

import pytest

from benchclaw.errors import FormatError, InputError, ProviderConfigError
from benchclaw.providers.catalog import load_catalog, shipped_catalogs


def test_shipped_catalogs_share_tier_names():
    assert {"sim", "nebius-nemotron"} <= set(shipped_catalogs())
    sim, neb = load_catalog("sim"), load_catalog("nebius-nemotron")
    assert sim.ladder == neb.ladder == ("lightning", "super", "ultra")
    assert sim.simulated and not neb.simulated
    assert neb.tier("ultra").model == "nvidia/Nemotron-3-Ultra-550b-a55b"
    assert neb.tier("lightning").base_url == "https://api.tokenfactory.nebius.com/v1/"
    assert neb.tier("super").key_env == "NEBIUS_API_KEY"
    assert sim.tier("reckless").always_follow_injections and "reckless" not in sim.ladder


def test_digest_is_over_exact_file_bytes():
    sim = load_catalog("sim")
    assert sim.digest == "sha256:" + hashlib.sha256(sim.path.read_bytes()).hexdigest()
    assert sim.ref() == {"name": "sim", "digest": sim.digest}


def test_unknown_prices_refuse_a_costed_run_naming_tier_and_field():
    neb = load_catalog("nebius-nemotron")
    with pytest.raises(ProviderConfigError, match=r"tier 'super': price input"):
        neb.require_prices(["super"])
    load_catalog("sim").require_prices()  # simulated prices are all set


def test_user_catalog_extends_and_overrides(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('v = 1\nname = "mine"\nextends = "nebius-nemotron"\n'
                 '[tiers.super.prices]\ninput = "0.10"\ncached_input = "0.02"\noutput = "0.40"\n'
                 '[tiers.local]\nprovider = "openai"\nmodel = "qwen"\nbase_url = "http://127.0.0.1:8000/v1"\n'
                 'prices = { input = "0", output = "0" }\n')
    cat = load_catalog(f)
    assert cat.tier("super").prices.input == Decimal("0.10")
    assert cat.tier("super").model == "nvidia/nemotron-3-super-120b-a12b"
    cat.require_prices(["super", "local"])
    with pytest.raises(ProviderConfigError, match="lightning"):
        cat.require_prices()
    assert cat.ref()["extends"]["name"] == "nebius-nemotron"
    assert set(cat.files()) == {"mine.toml", "nebius-nemotron.toml"}
    assert cat.ladder == ("lightning", "super", "ultra")


@pytest.mark.parametrize("text, match", [
    ('v = 2\nname = "x"\n[tiers.a]\nprovider="sim"\nmodel="m"\nprices={input="1",output="1"}\n', "v must be 1"),
    ('v = 1\nname = "x"\n[tiers.a]\nprovider="gpt"\nmodel="m"\nprices={input="1",output="1"}\n', "tiers.a.provider"),
    ('v = 1\nname = "x"\n[tiers.a]\nprovider="openai"\nmodel="m"\nprices={input="1",output="1"}\n', "base_url"),
    ('v = 1\nname = "x"\n[tiers.a]\nprovider="sim"\nmodel="m"\nprices={input="1.0e-3",output="1"}\n', "prices.input"),
    ('v = 1\nname = "x"\n[tiers.a]\nprovider="sim"\nmodel="m"\nprices={input=0.1,output="1"}\n', "prices.input"),
    ('v = 1\nname = "x"\n[tiers.a]\nprovider="sim"\nmodel="m"\n', "prices: missing"),
    ('v = 1\nname = "x"\n[tiers.a]\nprovider="sim"\nmodle="m"\nprices={input="1",output="1"}\n', "modle"),
    ('v = 1\nname = "x"\norder=["b"]\n[tiers.a]\nprovider="sim"\nmodel="m"\nprices={input="1",output="1"}\n', "order"),
    ('v = 1\nname = "x"\n[tiers', "not a valid TOML"),
])
def test_bad_catalogs_name_file_and_field(tmp_path, text, match):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(FormatError, match=match) as e:
        load_catalog(f)
    assert "bad.toml" in str(e.value)


def test_missing_catalog_lists_shipped_ones():
    with pytest.raises(InputError, match="shipped: .*sim"):
        load_catalog("nope")
    with pytest.raises(ProviderConfigError, match="tiers: lightning"):
        load_catalog("sim").tier("mega")


def test_extends_resolves_relative_paths_and_refuses_cycles(tmp_path):
    (tmp_path / "base.toml").write_text('v = 1\nname = "base"\n[tiers.a]\nprovider = "sim"\nmodel = "sim/ultra"\n'
                                        'prices = { input = "1", output = "2" }\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "top.toml").write_text('v = 1\nname = "top"\nextends = "../base.toml"\n'
                                               '[tiers.a.prices]\noutput = "3"\n')
    top = load_catalog(tmp_path / "sub" / "top.toml")
    assert top.tier("a").prices.output == Decimal("3") and top.base.name == "base"
    (tmp_path / "x.toml").write_text('v = 1\nname = "x"\nextends = "y.toml"\n')
    (tmp_path / "y.toml").write_text('v = 1\nname = "y"\nextends = "x.toml"\n')
    with pytest.raises(FormatError, match="cycle"):
        load_catalog(tmp_path / "x.toml")


def test_unknown_price_message_says_which_file_to_edit(tmp_path):
    import pytest

    from benchclaw.errors import ProviderConfigError
    from benchclaw.providers.catalog import load_catalog

    with pytest.raises(ProviderConfigError, match=r"own catalog file with extends = 'nebius-nemotron'"):
        load_catalog("nebius-nemotron").require_prices(["ultra"])
    mine = tmp_path / "my-nebius.toml"
    mine.write_text('v = 1\nname = "my-nebius"\nextends = "nebius-nemotron"\n'
                    '[tiers.ultra.prices]\ninput = "0.6"\noutput = "1.8"\n')
    with pytest.raises(ProviderConfigError, match=r"price cached_input is \"unknown\".* in my-nebius\.toml"):
        load_catalog(str(mine)).require_prices(["ultra"])
