"""Agent profiles are data files: the shipped two, a user's own, and every way one can be wrong."""

import pytest

from benchclaw.agent import load_profile, shipped_profiles
from benchclaw.agent.profiles import parse_profile
from benchclaw.errors import FormatError, InputError


def test_the_two_shipped_profiles_differ_only_where_they_should():
    direct, checker = load_profile("direct"), load_profile("checker")
    assert {"direct", "checker"} <= set(shipped_profiles())
    assert direct.actions == ("read", "write", "finish")
    assert checker.actions == ("read", "write", "check", "finish")
    assert '"action": "check"' in checker.system_prompt and '"action": "check"' not in direct.system_prompt
    assert direct.max_turns == checker.max_turns == 12
    assert direct.digest != checker.digest and direct.digest.startswith("sha256:")


GOOD = b'''v = 1
name = "terse"
actions = ["write", "finish"]
max_turns = 3
system_prompt = """Reply {"action": "write", "path": "p", "content": "c"} or {"action": "finish", "summary": "s"}."""
'''


def test_a_user_profile_loads_from_a_path(tmp_path):
    p = tmp_path / "terse.toml"
    p.write_bytes(GOOD)
    prof = load_profile(p)
    assert prof.name == "terse" and prof.actions == ("write", "finish") and prof.max_turns == 3
    assert prof.source_bytes == GOOD


@pytest.mark.parametrize("edit, says", [
    ((b"v = 1", b"v = 2"), "unknown profile version"),
    ((b'name = "terse"', b'name = "terse"\ncolour = "red"'), "unknown key 'colour'"),
    ((b"max_turns = 3\n", b""), "missing key 'max_turns'"),
    ((b"max_turns = 3", b'max_turns = "3"'), "'max_turns' must be a int"),
    ((b"max_turns = 3", b"max_turns = 0"), "'max_turns' must be between"),
    ((b'"write", "finish"', b'"write", "finish", "shell"'), "unknown action 'shell'"),
    ((b'["write", "finish"]', b'["write"]'), "must include 'finish'"),
    ((b'["write", "finish"]', b'["write", "finish", "check"]'), "does not show the offered action 'check'"),
    ((b'or {"action": "finish"', b'or {"action": "check"} or {"action": "finish"'), "shows the action 'check'"),
    ((b'name = "terse"', b'name = "Terse Profile"'), "'name' must be lower-case"),
    ((b"v = 1", b"v = = 1"), "not a readable TOML file"),
])
def test_bad_profiles_are_refused_naming_the_file_and_key(edit, says):
    with pytest.raises(FormatError, match="myprofile.toml") as err:
        parse_profile(GOOD.replace(*edit), "myprofile.toml")
    assert says in str(err.value)


def test_unknown_names_and_missing_files_say_what_exists(tmp_path):
    with pytest.raises(InputError, match="shipped: .*checker.*direct"):
        load_profile("nosuch")
    with pytest.raises(InputError, match="not found"):
        load_profile(tmp_path / "absent.toml")
