"""The api_contract check and its declarative API model: references pass, every reference
case is needed, a changed expectation fails, and the details say which case and why."""

from __future__ import annotations

import copy
import json

import pytest

from benchclaw.checks import CheckSpec, run_check, validate_spec
from benchclaw.checks.apimodel import ModelError, apply_patch, parse_model
from benchclaw.checks.tasks import check_artifacts, find_tasks, get_task

API_TASKS = [t for t in find_tasks() if t.family == "api"]
IDS = [t.id for t in API_TASKS]


def failures(task, contract) -> dict[str, str]:
    data = contract if isinstance(contract, bytes) else json.dumps(contract).encode()
    return {r.id: r.detail for r in check_artifacts(task, {"contract.json": data}) if not r.passed}


def reference(task) -> dict:
    return json.loads(task.reference["contract.json"])


@pytest.mark.parametrize("task", API_TASKS, ids=IDS)
def test_reference_passes_and_catches_every_fault(task):
    assert failures(task, reference(task)) == {}
    details = {r.id: r.detail for r in check_artifacts(task, task.reference)}
    assert "faulty implementations caught" in details["contract-catches-faults"]


@pytest.mark.parametrize("task", API_TASKS, ids=IDS)
def test_dropping_any_case_lets_a_fault_through(task):
    ref = reference(task)
    for i, case in enumerate(ref["cases"]):
        fewer = {"cases": ref["cases"][:i] + ref["cases"][i + 1:]}
        bad = failures(task, fewer)
        assert "faulty implementations pass every case" in bad.get("contract-catches-faults", ""), case["id"]
        assert "contract-correct" not in bad  # still right, just not enough


@pytest.mark.parametrize("task", API_TASKS, ids=IDS)
def test_changing_any_expected_number_fails_on_the_correct_implementation(task):
    ref = reference(task)
    spots = [(i, "status", None) for i in range(len(ref["cases"]))]
    spots += [(i, "body", j) for i, c in enumerate(ref["cases"]) for j, a in enumerate(c["expect"]["body"])
              if isinstance(a.get("equals", a.get("length")), int)]
    for i, where, j in spots:
        broken = copy.deepcopy(ref)
        exp = broken["cases"][i]["expect"]
        if where == "status":
            exp["status"] += 1
        else:
            op = "equals" if "equals" in exp["body"][j] else "length"
            exp["body"][j][op] += 1
        detail = failures(task, broken).get("contract-correct", "")
        assert f"case {ref['cases'][i]['id']!r} fails on the correct implementation" in detail, (i, where, j)


def test_volatile_values_fail_on_a_second_request():
    task = get_task("api-orders")
    ref = reference(task)
    ref["cases"][0]["expect"]["body"].append({"path": "created_at", "equals": "2026-03-02T09:01:00Z"})
    detail = failures(task, ref)["contract-correct"]
    assert "get-first" in detail and "created_at" in detail
    ref = reference(task)
    ref["cases"][0]["expect"]["body"].append({"path": "request_id", "type": "string"})
    assert failures(task, ref) == {}  # a type assertion on a volatile value is fine


def test_happy_path_only_passes_the_gate_and_names_the_faults_it_misses():
    task = get_task("api-tickets")
    happy = {"cases": [c for c in reference(task)["cases"] if c["expect"]["status"] < 400]}
    bad = failures(task, happy)
    assert set(bad) == {"contract-catches-faults"}
    assert "no-minimum" in bad["contract-catches-faults"] and "+1 more" in bad["contract-catches-faults"]


@pytest.mark.parametrize("contract, detail", [
    (b"not json", "not valid JSON"),
    ({"tests": []}, 'must be an object with a "cases" array'),
    ({"cases": []}, "1 to 200 cases"),
    ({"cases": [{"id": "a", "request": {"method": "GET", "path": "/v2/orders"},
                 "expect": {"status": 200, "body": [{"path": "items", "equals": 1, "length": 2}]}}]},
     r"cases[0].expect.body[0]: needs exactly one of"),
    ({"cases": [{"id": "a", "request": {"method": "BREW", "path": "/v2/orders"}, "expect": {"status": 200}}]},
     "method must be one of"),
    ({"cases": [{"id": "a", "request": {"method": "GET", "path": "/v2/orders", "query": {"page": 2}},
                 "expect": {"status": 200}}]}, "query: an object of strings"),
    ({"cases": [{"id": "a", "request": {"method": "GET", "path": "/v2/orders"}, "expect": {"status": 200}},
                {"id": "a", "request": {"method": "GET", "path": "/v2/orders"}, "expect": {"status": 200}}]},
     "cases[1].id: must be a unique"),
    ({"cases": [{"id": "a", "request": {"method": "GET", "path": "/v2/orders"},
                 "expect": {"status": 200, "body": [{"path": "items[", "present": True}]}}]}, "needs a 'path'"),
])
def test_malformed_contracts_fail_with_the_field(contract, detail):
    bad = failures(get_task("api-orders"), contract)
    assert detail in bad["contract-correct"], bad


def test_the_model_answers_like_the_documented_api():
    model_obj = json.loads(get_task("api-orders").inputs["service/model.json"])
    api = parse_model(model_obj)
    page = api.handle("GET", "/v2/orders", {"page": "3"}, None, 1)
    assert page.status == 200 and len(page.body["items"]) == 7 and page.body["total"] == 57
    assert api.handle("GET", "/v2/orders", {"per_page": "0"}, None, 1).body["error"] == \
        {"code": "invalid", "field": "per_page"}
    assert api.handle("GET", "/v2/orders/01", {}, None, 1).status == 404
    assert api.handle("PUT", "/v2/orders/1", {}, None, 1).status == 405
    assert api.handle("GET", "/v1/orders", {}, None, 1).status == 404
    created = api.handle("POST", "/v2/orders", {}, {"customer": "X", "quantity": True}, 1)
    assert created.status == 422 and created.body["error"]["field"] == "quantity"  # a bool is no integer
    a, b = (api.handle("GET", "/v2/orders/1", {}, None, s).body for s in (1, 2))
    assert a["request_id"] != b["request_id"] and a["created_at"] != b["created_at"]
    assert {k: v for k, v in a.items() if k not in ("request_id", "created_at")} == \
        {k: v for k, v in b.items() if k not in ("request_id", "created_at")}


def test_patches_and_models_are_validated():
    obj = json.loads(get_task("api-orders").inputs["service/model.json"])
    with pytest.raises(ModelError, match="does not exist"):
        apply_patch(obj, [{"path": "resources.7.list", "value": 1}])
    with pytest.raises(ModelError, match="exactly one of"):
        apply_patch(obj, [{"path": "errors", "value": 1, "remove": True}])
    with pytest.raises(ModelError, match="errors.not_found.status"):
        parse_model(apply_patch(obj, [{"path": "errors.not_found.status", "value": "404"}]))
    assert obj["errors"]["not_found"]["status"] == 404  # patches copy


def test_a_bad_mutant_or_model_fails_the_check_as_a_task_problem():
    task = get_task("api-orders")
    spec = next(c for c in task.checks if c.id == "contract-catches-faults")
    heldout = {"mutants.json": json.dumps({"mutants": [{"id": "m", "patch": [{"path": "nope.x", "value": 1}]}]}).encode()}
    res = run_check(spec, {**task.inputs, "contract.json": task.reference["contract.json"]}, heldout)
    assert not res.passed and res.detail.startswith("bad task mutant 'm'")
    files = {**task.inputs, "service/model.json": b'{"v": 2}', "contract.json": task.reference["contract.json"]}
    res = run_check(spec, files, task.heldout)
    assert not res.passed and res.detail.startswith("bad task model")


def test_spec_validation_names_the_field():
    with pytest.raises(ValueError, match=r"field 'mutants\[1\]'"):
        validate_spec(CheckSpec("c", "api_contract", False, {
            "artifact": "c.json", "model": "m.json",
            "mutants": [{"id": "a", "patch": []}, {"id": "a", "patch": []}]}), {})
