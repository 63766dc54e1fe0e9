"""The host `--gpu auto` resolves for: this host's facts (the probe's GPU, driver and OS sections, and the Python a
user runs here), or a facts file recorded on the GPU host (envkit doctor --json there, --host-facts FILE here)."""
from __future__ import annotations

from typing import Any, Optional

from envkit.app import interpreters
from envkit.errors import InputError
from envkit.inimage import probe
from envkit.model.host_view import HostView

HOST_SECTIONS = ("nvidia", "amd", "os")


def _primary_from(record: dict[str, Any]) -> Optional[tuple[str, str]]:
    """A doctor --json record's primary interpreter (its `interpreters`), where it has one."""
    for entry in record.get("interpreters") or []:
        if isinstance(entry, dict) and entry.get("primary") and isinstance(entry.get("python"), dict):
            version, path = entry["python"].get("python"), entry.get("path")
            if isinstance(version, str) and isinstance(path, str):
                return version, path
    return None


def view(facts_file: Optional[str] = None) -> HostView:
    if facts_file:
        from envkit.app.doctor import read_facts, read_record

        record = read_record(facts_file)
        return HostView.from_facts(read_facts(facts_file), f"facts file {facts_file}", _primary_from(record))
    record = probe.collect(sections=HOST_SECTIONS)
    interp = interpreters.primary()
    python = None
    if interp is not None:
        rec = interpreters.probe_python(interp)
        version = (rec.get("python") or {}).get("python") if isinstance(rec.get("python"), dict) else None
        if isinstance(version, str):
            python = (version, interp.path)
    return HostView.from_facts(record, "this host", python)


def needs_facts_with_auto(facts_file: Optional[str], auto: bool) -> None:
    if facts_file and not auto:
        raise InputError("--host-facts is what --gpu auto reads", "add --gpu auto, or drop --host-facts")
