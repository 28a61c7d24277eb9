"""BFCL with the final work turn under a grammar (eval/bfcl_structured.py)."""

from __future__ import annotations

import json
import sys
from typing import Any

import bfcl_data
import bfcl_structured
import pytest
from openai_server import Reply, completion


def test_the_exact_schema_allows_the_cases_functions_and_their_arguments_only() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    (case,) = bfcl_data.dataset("simple_python", 1).cases
    schema = bfcl_data.calls_schema(case)
    (function,) = bfcl_data.openai_tools(bfcl_data.functions(case))
    name = function["function"]["name"]
    required = function["function"]["parameters"].get("required", [])
    jsonschema.validate([], schema)  # no call is an answer too (irrelevance)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "not_" + name, "arguments": {}}], schema)
    if required:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate([{"name": name, "arguments": {}}], schema)


def test_each_variant_sends_its_grammar_and_the_runs_are_recorded_once(
    server: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (case,) = bfcl_data.dataset("simple_python", 1).cases
    server.script(*[Reply.json(completion("[]"))] * 2)
    argv = ["bfcl_structured", "--base-url", server.base_url, "--cases", "1",
            "--categories", "simple_python", "--results", str(tmp_path)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    bfcl_structured.main()
    sent = [r.json["response_format"] for r in server.requests]
    assert [body["type"] for body in sent] == ["json_schema", "json_schema"]
    generic, exact = (body["json_schema"]["schema"] for body in sent)
    assert exact == bfcl_data.calls_schema(case)
    assert generic != exact and generic["type"] == "array"
    out = tmp_path / "qwen1.5b" / "bfcl-structured.jsonl"
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["variant"] for r in records] == ["structured-final", "structured-final-exact"]
    bfcl_structured.main()  # both recorded: nothing is sent again
    assert len(server.requests) == 2
