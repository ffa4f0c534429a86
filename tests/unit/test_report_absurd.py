"""`runbook report` of a run whose trainer printed absurd losses (+-1e308): the report is still written."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from runbook.cli import app
from tests.unit.test_report_status import finished_run, progress_line  # noqa: F401  (the fixture)

runner = CliRunner()


def test_a_run_with_losses_of_plus_and_minus_1e308_still_gets_its_report(finished_run: Path):
    """QA: the loss plot died with LinAlgError (a log-scale axis over -1e308..1e308) and no report was written."""
    log = finished_run.parent.parent / "runs" / "pretrain" / "logs" / "trainer-002.log"
    lines = log.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if " step 50 |" in line)
    lines[at: at + 3] = [progress_line(50, 1e308), progress_line(51, -1e308), progress_line(52, 1e300)]
    val = next(i for i, line in enumerate(lines) if line.startswith("iter 240: val loss"))
    lines[val] = f"iter 240: val loss {-1e308:.4f}, val time: 10.00 ms"
    log.write_text("\n".join(lines) + "\n")

    result = runner.invoke(app, ["report", str(finished_run)])
    assert result.exit_code == 0, (result.output, result.exception)
    report_dir = finished_run.parent.parent / "runs" / "pretrain" / "report"
    assert (report_dir / "report-loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (report_dir / "report.md").read_text()
    assert "| incident-2 | loss-spike | recovered |" in markdown
    assert "4 absurd loss value(s) not drawn" in markdown and "| best val loss | 4.6000 |" in markdown   # not -1e308
