"""BullMQ beside wheelq (loadtest/bullmq_side_by_side.py, benchlib/peer_bullmq.py) without a
server or Node: the pins npm installs from, what is kept out of git, the skip without
Node, and how per-round figures become medians and wheelq / BullMQ ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from benchlib import peer_bullmq
from benchlib.peer_base import Run
from benchlib.peer_bullmq import BULLMQ_DIR, PACKAGES, BullmqPeer, NodeUnavailable
from bullmq_side_by_side import ratio, side_by_side

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(BULLMQ_DIR) / "package.json"
LOCK = Path(BULLMQ_DIR) / "package-lock.json"


def test_package_json_pins_exact_versions_of_bullmq_and_its_redis_client() -> None:
    dependencies = json.loads(PACKAGE.read_text())["dependencies"]
    assert set(dependencies) == set(PACKAGES)
    for name, version in dependencies.items():
        assert version[0].isdigit() and set(version) <= set("0123456789."), (name, version)


def test_the_lock_installs_the_pinned_versions() -> None:
    pins = json.loads(PACKAGE.read_text())["dependencies"]
    lock = json.loads(LOCK.read_text())
    assert lock["packages"][""]["dependencies"] == pins
    for name, version in pins.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


def test_node_modules_is_kept_out_of_git() -> None:
    path = Path(BULLMQ_DIR).relative_to(ROOT) / "node_modules" / "bullmq" / "package.json"
    done = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT, check=False)
    assert done.returncode == 0, f"{path} is not ignored by git"


def test_without_node_the_peer_is_unavailable_with_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(peer_bullmq.shutil, "which", lambda name: None)
    with pytest.raises(NodeUnavailable, match=r"node not found on PATH.*Node\.js >= 18"):
        peer_bullmq.ensure_installed()


def test_the_side_by_side_script_skips_without_node(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bullmq_side_by_side

    monkeypatch.setattr(peer_bullmq.shutil, "which", lambda name: None)
    assert bullmq_side_by_side.main(["--quick"]) == 0
    out = capsys.readouterr()
    assert "skipped" in json.loads(out.out)
    assert "node not found" in out.err


def test_the_peers_worker_runs_at_its_settings_concurrency() -> None:
    peer = BullmqPeer(busy_concurrency=50)
    run = Run("bullmq", "redis://127.0.0.1:1/0", "ab12", "/tmp/x.rec")
    [default] = peer.worker_commands(run, "default")
    [busy] = peer.worker_commands(run, "aggressive")
    assert default[0] == "bullmq"
    assert default[-2:] == ["--concurrency", "1"]
    assert busy[-2:] == ["--concurrency", "50"]
    assert "--queue" in busy and run.queue in busy


def test_ratio_is_none_when_either_side_is_missing_or_zero() -> None:
    assert ratio(1.0, 4.0) == 0.25
    assert ratio(None, 4.0) is None
    assert ratio(1.0, None) is None
    assert ratio(1.0, 0) is None


def test_side_by_side_takes_medians_and_the_median_of_per_round_ratios() -> None:
    runs = [
        ({"p99_ms": 2.0, "rate_per_s": 10.0, "missing": 0}, {"p99_ms": 20.0, "missing": 0}),
        ({"p99_ms": 3.0, "rate_per_s": 30.0, "missing": 0}, {"p99_ms": 10.0, "missing": 1}),
        ({"p99_ms": 9.0, "rate_per_s": 20.0, "missing": 0}, {"p99_ms": 30.0, "missing": 0}),
    ]
    out = side_by_side(runs)
    assert out["wheelq"]["median"] == {"p99_ms": 3.0, "rate_per_s": 20.0, "missing": 0}
    assert out["bullmq"]["median"] == {"p99_ms": 20.0, "missing": 0}
    assert out["bullmq"]["runs"] == [b for _, b in runs]
    # per-round ratios 0.1, 0.3, 0.3: not the ratio of the medians (0.15); no ratio of counts
    assert out["wheelq_to_bullmq"] == {"p99_ms": 0.3}
