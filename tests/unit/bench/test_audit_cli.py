"""Tests for ``tritongym audit``: JSON lines, report files and exit codes."""

from __future__ import annotations

import json

import pytest

from tritongym.cli import EXIT_OK, EXIT_USAGE, main

UNIFORM_RELU = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(8, 16)]


def get_init_inputs():
    return []
'''


@pytest.mark.slow  # a real audit run through the CLI: the full tier (test_audit.py audits by default)
def test_audit_command_writes_json_lines_markdown_and_flags(tmp_path, capsys):
    problem = tmp_path / "19_ReLU.py"
    problem.write_text(UNIFORM_RELU, encoding="utf-8")
    markdown, flags = tmp_path / "audit.md", tmp_path / "flags.json"
    code = main(["audit", "--problems", str(problem), "--input-seeds", "2", "--weight-seeds", "1", "--json",
                 "--markdown", str(markdown), "--flags-json", str(flags)])
    assert code == EXIT_OK
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["status"] == "audited" and "identity_on_task_inputs" in record["flags"]
    document = json.loads(flags.read_text())
    assert [entry["problem_id"] for entry in document["problems"].values()] == ["19_ReLU"]
    report = markdown.read_text()
    assert "tritongym audit --problems" in report and "`identity_on_task_inputs` | 1 | 1 |" in report


def test_audit_command_usage_errors_exit_2(tmp_path, capsys):
    assert main(["audit", "--problems", str(tmp_path / "missing.py")]) == EXIT_USAGE
    problem = tmp_path / "p.py"
    problem.write_text(UNIFORM_RELU, encoding="utf-8")
    assert main(["audit", "--problems", str(problem), "--memory-budget-gb", "0"]) == EXIT_USAGE
    assert main(["audit", "--problems", str(problem), "--input-seeds", "1"]) == EXIT_USAGE
    assert "input_seeds must be an integer >= 2" in capsys.readouterr().err
