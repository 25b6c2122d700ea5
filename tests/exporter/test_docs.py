"""docs/metrics.md and the README keep up with the code."""

from __future__ import annotations

import re
import runpy

from exporter.flags import build_parser
from tests.conftest import ManualClock
from tests.exporter.helpers import rig
from tests.exporter.test_collector import EPOCH_TS, fleet, h100
from tests.procs import ROOT


def test_metrics_doc_is_generated_from_the_catalogue() -> None:
    render = runpy.run_path(str(ROOT / "scripts" / "gen_metrics_doc.py"))["render"]
    committed = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert committed == render(), "run: python scripts/gen_metrics_doc.py"


def test_every_emitted_family_is_documented() -> None:
    clock = ManualClock(EPOCH_TS)
    r = rig(fleet(h100(), h100(lost_at=100)), clock)
    r.collect()
    clock.advance(60)  # past the XIDs, clock events and NVLink errors of the spec
    r.collect_until(lambda m: "gpu_xid_errors_total" in m)  # XIDs arrive in the background
    text = r.exporter.exposition.body("text").decode()
    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert "gpu_xid_errors_total" in names and "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L2" in names
    for name in sorted(names):
        documented = re.sub(r"_L\d+$", "_L0", name)
        if name.startswith("process_"):
            documented = "process_*"
        assert f"`{documented}`" in doc, f"{name} is not in docs/metrics.md"


def test_readme_gives_the_two_commands_every_flag_and_the_metrics_doc() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo" in readme and "make test" in readme
    assert "docs/metrics.md" in readme
    for action in build_parser()._actions:
        for flag in action.option_strings:
            if flag in {"-h", "--help"} or flag.startswith("--no-collector."):
                continue
            shown = re.sub(r"^--collector\.\w+$", "--collector.<name>", flag)
            assert shown in readme, f"README does not mention {shown}"
    assert "GPU_EXPORTER_" in readme
