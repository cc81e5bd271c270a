"""`regal.units`: human figures, their inverse up to the printed rounding, and % changes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regal.units import (duration_unit, format_bytes, format_change, format_duration_us,
                         parse_bytes, parse_duration_us)


@pytest.mark.parametrize("value, text", [(0, "0 B"), (512, "512 B"), (1023, "1023 B"),
                                         (1024, "1.00 KiB"), (1536, "1.50 KiB"),
                                         (5 * 2**20, "5.00 MiB"), (3 * 2**30 // 2, "1.50 GiB"),
                                         (2**41, "2.00 TiB")])
def test_format_bytes(value, text):
    assert format_bytes(value) == text


@pytest.mark.parametrize("value, text", [(0, "0.0 us"), (850, "850.0 us"), (999.94, "999.9 us"),
                                         (1665, "1.67 ms"), (3_656_000, "3.66 s")])
def test_format_duration_us(value, text):
    assert format_duration_us(value) == text


@given(st.integers(0, 2**62))
def test_parse_bytes_inverts_format_within_rounding(value):
    # two decimals of the unit: at most half a hundredth of it off, exact below 1 KiB
    assert parse_bytes(format_bytes(value)) == pytest.approx(value, rel=5e-3, abs=0.5)


@given(st.floats(0, 1e12))
def test_parse_duration_inverts_format_within_rounding(value):
    # one decimal of a microsecond: at most 0.05 us off, plus the float error of the decimal
    # (1.25 prints as '1.2 us': 0.05 + 4e-17 off)
    assert parse_duration_us(format_duration_us(value)) == pytest.approx(value, rel=5e-3,
                                                                         abs=0.05 + 1e-9)


@given(st.floats(0, 1e12))
def test_duration_unit_is_the_unit_format_prints(value):
    name, scale = duration_unit(value)
    assert format_duration_us(value).endswith(" " + name)
    assert parse_duration_us(f"1 {name}") == scale


@pytest.mark.parametrize("text", ["", "12", "1.5 XB", "abc KiB", "1.5KiB"])
def test_parse_refuses_what_format_never_prints(text):
    with pytest.raises(ValueError, match="as printed"):
        parse_bytes(text)


@pytest.mark.parametrize("value, reference, text", [
    (3656, 1665, "+119.6%"), (956, 2857, "-66.5%"), (5, 5, "+0.0%"), (1, 0, ""),
    (float("inf"), 1, ""), (2, -4, "+150.0%")])
def test_format_change(value, reference, text):
    assert format_change(value, reference) == text
