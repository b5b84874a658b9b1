"""Short targets users type (`znver3`, `llvm -mcpu=znver3`) and unknown CPU names."""

from __future__ import annotations

import pytest

from codegen.host import host_cpu_name, host_target, parse_target, parse_user_target
from ir.cpus import cpu_features, known_cpus
from ir.target import Target, TargetError, parse_short
from service.cli.main import main


def test_a_short_form_expands_to_the_canonical_target_of_that_cpu() -> None:
    features = cpu_features("emeraldrapids")
    assert features is not None
    full = f"llvm -mcpu=emeraldrapids -mattr={','.join(features)} -num-threads=1"
    assert parse_short("emeraldrapids") == parse_target(full)
    assert parse_short("llvm -mcpu=emeraldrapids") == parse_target(full)
    assert parse_short("emeraldrapids -num-threads=4") == parse_target(full).with_threads(4)
    # LLVM's lists, closed under implication: avx512f brings avx2 and sse4.2 along.
    assert {"+amx-tile", "+avx512fp16", "+avx2", "+sse4.2"} <= set(features)
    zen3 = set(cpu_features("znver3") or ())
    assert "+avx2" in zen3 and "+vaes" in zen3 and "+avx512f" not in zen3


def test_full_targets_and_host_are_not_short() -> None:
    assert parse_short("host") is None
    assert parse_short("llvm -mcpu=znver3 -mattr=+avx2") is None
    # Target.parse keeps its meaning: a canonical without -mattr has no features.
    assert Target.parse("llvm -mcpu=x86-64").features == ()


def test_the_host_cpu_by_name_is_this_machine() -> None:
    if host_cpu_name() not in known_cpus():
        pytest.skip(f"host CPU {host_cpu_name()} is not in the table")
    assert parse_user_target(host_cpu_name()) == host_target()
    assert parse_user_target(f"llvm -mcpu={host_cpu_name()} -num-threads=2") == host_target(2)


@pytest.mark.parametrize(
    ("text", "suggested"),
    [("znver9", "znver5"), ("llvm -mcpu=emeraldrapid", "emeraldrapids"), ("notacpu", "x86-64-v3")],
)
def test_an_unknown_cpu_is_refused_naming_the_closest(text: str, suggested: str) -> None:
    with pytest.raises(TargetError, match="unknown CPU") as e:
        parse_short(text)
    assert suggested in str(e.value) and "\n" not in str(e.value)


def test_the_cli_refuses_an_unknown_cpu_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOMTUNE_DATABASE_URL", f"sqlite:///{tmp_path / 'x.db'}")
    assert main(["best", "matmul", "m=16", "n=16", "k=16", "--target", "skylake-avx51"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean skylake-avx512" in err
    assert main(["best", "matmul", "m=16", "n=16", "k=16", "--target", "znver3"]) == 2
    assert "no correct record" in capsys.readouterr().err  # accepted: only nothing is stored
