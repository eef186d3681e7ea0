"""Durations print as people read them (`2d14h`, `3m45s`) and duration flags take `15s`, `2m`
or plain seconds; a bad one is a usage error naming the flag and the rule."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from gpufleet.cli.durations import duration_parser
from gpufleet.cli.main import app
from gpufleet.core.diagnosis import expired, stale
from gpufleet.core.durations import format_duration, parse_duration

runner = CliRunner()


@dataclass(frozen=True)
class Case:
    seconds: float
    shown: str


FORMAT = [
    Case(0, "0s"),
    Case(0.5, "0.5s"),
    Case(45, "45s"),
    Case(59.99, "59.9s"),  # never rounded up to a minute
    Case(60, "1m"),
    Case(125, "2m5s"),
    Case(225, "3m45s"),
    Case(3600, "1h"),
    Case(5 * 3600 + 30 * 60 + 59, "5h30m"),
    Case(225307, "2d14h"),
    Case(-225, "-3m45s"),
]


@pytest.mark.parametrize("case", FORMAT, ids=lambda c: c.shown)
def test_format_duration(case: Case) -> None:
    assert format_duration(case.seconds) == case.shown


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15", 15),
        ("2.5", 2.5),
        ("15s", 15),
        ("2m", 120),
        ("1h30m", 5400),
        ("500ms", 0.5),
        ("2d", 172800),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "x", "15x", "1m 2s", "-1", "-5s", "inf", "nan", "s"])
def test_a_bad_duration_names_the_rule(text: str) -> None:
    with pytest.raises(ValueError, match="must be a duration"):
        parse_duration(text)


def test_diagnosis_messages_print_durations_and_keep_seconds_in_details() -> None:
    reason = expired(225307.4, 300)
    assert reason.message == "agent silent for 2d14h (expires after 5m): no new replicas"
    assert reason.details == {"age_s": 225307, "expire_after_s": 300}
    assert stale(75, 60).message == "observation is 1m15s old (stale after 1m)"


def test_the_whole_seconds_parser_returns_an_int_and_refuses_fractions() -> None:
    parse = duration_parser(2, is_whole=True)
    assert (parse("15s"), parse("1m"), parse(15)) == (15, 60, 15)
    assert isinstance(parse("15s"), int)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["controller", "--debounce", "5x"], "'--debounce': '5x' must be a duration"),
        (["controller", "--stuck-after", "0.5"], "'--stuck-after': '0.5' must be at least 1s"),
        (["controller", "--lease-duration", "2.5s"], "'--lease-duration': '2.5s' must be whole"),
        (["agent", "--cluster", "a", "--heartbeat-interval", "-1"], "'--heartbeat-interval'"),
    ],
)
def test_a_bad_duration_flag_is_a_usage_error(args: list[str], expected: str) -> None:
    result = runner.invoke(app, args, env={"COLUMNS": "1000"})
    assert result.exit_code == 2, result.output
    assert expected in " ".join(result.output.split()) and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["controller", "agent"])
def test_help_shows_duration_flags_with_their_defaults_as_durations(command: str) -> None:
    text = " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output.split())
    assert "--resync-period DURATION" in text and "[default: 30s]" in text
    assert "--debounce DURATION" in text and "[default: 0.5s]" in text
    assert "NUMBER" not in text
