"""Tests of leap_stream.core.catalog: the packaged catalog, validation errors, and the helpers."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pydantic
import pytest
from realdata_paths import REALDATA

from leap_stream.core.catalog import (
    VENDORS,
    Accelerator,
    Catalog,
    CatalogError,
    catalog_markdown,
    default_catalog,
    load_catalog,
)
from leap_stream.core.events import FRAMEWORKS, PRECISIONS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "catalog.md"

VALID: dict[str, Any] = {
    "name": "X1",
    "vendor": "NVIDIA",
    "bf16_tflops": 100.0,
    "fp8_support": True,
    "memory_gb": 80,
    "memory_bw_tbps": 2.0,
    "interconnect_gbps": 900,
    "devices_per_node": 8,
    "scale_out_gbps": 50,
    "frameworks": ["pytorch", "jax"],
    "launch_date": date(2023, 3, 1),
    "price_per_device_hour": 4.0,
    "source": "test sheet",
}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)  # numbers and dates are their own TOML literals


def _write(tmp_path: Path, *entries: dict[str, Any]) -> Path:
    lines = []
    for entry in entries:
        lines.append("[[accelerator]]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in entry.items())
        lines.append("")
    path = tmp_path / "catalog.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _entry(**changes: Any) -> dict[str, Any]:
    entry = {**VALID, **changes}
    return {key: value for key, value in entry.items() if value is not None}


# ------------------------------------------------------------------ the packaged catalog


def test_packaged_catalog_has_enough_types_and_vendors() -> None:
    catalog = load_catalog()
    assert len(catalog) >= 28
    assert {"NVIDIA", "AMD", "Intel", "Google", "AWS"} <= set(catalog.vendors)
    assert set(catalog.vendors) <= set(VENDORS)


def test_packaged_catalog_includes_current_generation() -> None:
    catalog = default_catalog()
    for name in (
        "B200",
        "GB200",
        "B300",
        "H200-SXM",
        "H100-PCIe",
        "L4",
        "MI300X",
        "MI325X",
        "MI355X",
        "MI250X",
        "Gaudi3",
        "TPU-v6e",
        "TPU-v7",
        "Trainium1",
        "Trainium2",
        "Trainium3",
        "V100-SXM2-16GB",
    ):
        assert name in catalog, name


def test_packaged_catalog_covers_every_mlperf_accelerator_type() -> None:
    path = REALDATA / "mlperf_training.csv"
    if not path.exists():
        pytest.skip(f"{path} not present")
    types = set(pd.read_csv(path, usecols=["accelerator_type"])["accelerator_type"].dropna())
    assert types, "no accelerator types read"
    assert sorted(types - set(default_catalog().names)) == []


def test_packaged_catalog_covers_every_neusight_accelerator_type() -> None:
    path = REALDATA / "neusight_latency.csv"
    if not path.exists():
        pytest.skip(f"{path} not present")
    types = set(pd.read_csv(path, usecols=["accelerator_type"])["accelerator_type"].dropna())
    assert sorted(types - set(default_catalog().names)) == []


def test_packaged_figures_rise_with_each_generation() -> None:
    # A typo of a factor of ten in a spec figure breaks one of these orderings.
    catalog = default_catalog()
    for older, newer in [
        ("V100-SXM2-16GB", "A100-SXM-80GB"),
        ("A100-SXM-80GB", "H100-SXM"),
        ("H100-SXM", "B200"),
        ("MI250X", "MI300X"),
        ("MI300X", "MI355X"),
        ("Gaudi2", "Gaudi3"),
        ("TPU-v5e", "TPU-v6e"),
        ("TPU-v6e", "TPU-v7"),
        ("Trainium1", "Trainium2"),
        ("Trainium2", "Trainium3"),
    ]:
        old, new = catalog[older], catalog[newer]
        assert new.peak_tflops("bf16") > old.peak_tflops("bf16"), (older, newer)
        assert new.memory_bw_tbps > old.memory_bw_tbps, (older, newer)
        assert new.launch_date > old.launch_date, (older, newer)
    assert catalog["H200-SXM"].memory_gb > catalog["H100-SXM"].memory_gb


def test_packaged_catalog_is_realistic_about_frameworks() -> None:
    catalog = default_catalog()
    for accelerator in catalog:
        if accelerator.vendor == "Google":
            assert {"jax", "pytorch"} <= set(accelerator.frameworks), accelerator.name
        if accelerator.vendor == "AWS":
            assert "tensorflow" not in accelerator.frameworks, accelerator.name
    assert catalog["Gaudi2"].frameworks == ("pytorch",)


def test_default_catalog_is_cached_and_equal_to_a_fresh_load() -> None:
    assert default_catalog() is default_catalog()
    assert load_catalog() == default_catalog()


def test_docs_table_matches_the_shipped_catalog() -> None:
    if not DOCS.exists():
        pytest.skip(f"{DOCS} not present")
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(r"<!-- catalog-table:start -->\n(.*?)<!-- catalog-table:end -->", text, re.S)
    assert match, "docs/catalog.md lacks the catalog-table markers"
    assert match.group(1) == catalog_markdown(default_catalog())


# ------------------------------------------------------------------ invalid files


@pytest.mark.parametrize(
    ("entry", "field", "detail"),
    [
        (_entry(memory_gb=-80), "memory_gb", "must be > 0, got -80"),
        (_entry(vendor="Nvidia"), "vendor", "must be one of"),
        (_entry(frameworks=["pytorch", "mxnet"]), "frameworks", "'mxnet'"),
        (_entry(frameworks=[]), "frameworks", "at least one"),
        (_entry(memory_bw_tbps=None), "memory_bw_tbps", "missing required field"),
        (_entry(tdp_watts=700), "tdp_watts", "unknown field"),
        (_entry(memory_gb="80"), "memory_gb", "got '80'"),  # a TOML string
        (_entry(fp8_support=False, fp8_tflops=500), "fp8_tflops", "fp8_support is false"),
        (_entry(devices_per_node=0), "devices_per_node", "must be >= 1"),
        (_entry(name="H100 SXM"), "name", "pattern"),
    ],
    ids=[
        "negative",
        "vendor",
        "framework",
        "no-frameworks",
        "missing",
        "extra",
        "quoted-number",
        "fp8-rate",
        "zero-devices",
        "bad-name",
    ],
)
def test_invalid_entry_raises_naming_file_entry_and_field(
    tmp_path: Path, entry: dict[str, Any], field: str, detail: str
) -> None:
    path = _write(tmp_path, _entry(name="OK1"), entry)
    with pytest.raises(CatalogError) as raised:
        load_catalog(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: accelerator #2 '{entry['name']}': {field}")
    assert detail in message
    assert "#1" not in message  # the valid entry is not blamed


def test_duplicate_name_names_both_entries(tmp_path: Path) -> None:
    path = _write(tmp_path, _entry(), _entry(name="X2"), _entry())
    with pytest.raises(CatalogError, match=r"accelerator #3 'X1': name duplicates accelerator #1"):
        load_catalog(path)


def test_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text('[[accelerator]]\nname = "X1"\nmemory_gb = = 80\n', encoding="utf-8")
    with pytest.raises(CatalogError, match=rf"^{re.escape(str(path))}: invalid TOML: .*line 3"):
        load_catalog(path)


def test_missing_file_is_a_catalog_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="file not found"):
        load_catalog(tmp_path / "nope.toml")


def test_empty_file_and_stray_top_level_keys_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "empty.toml"
    path.write_text("version = 1\n", encoding="utf-8")
    with pytest.raises(CatalogError) as raised:
        load_catalog(path)
    assert "unknown top-level keys ['version']" in str(raised.value)
    assert "no [[accelerator]] tables" in str(raised.value)


def test_all_problems_are_reported_together(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        _entry(name="A", memory_gb=-1, vendor="Acme"),
        _entry(name="B"),
        _entry(name="C", frameworks=["caffe"]),
    )
    with pytest.raises(CatalogError) as raised:
        load_catalog(path)
    lines = str(raised.value).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"{path}: accelerator #1 'A': vendor")
    assert lines[1].startswith(f"{path}: accelerator #1 'A': memory_gb must be > 0, got -1")
    assert lines[2].startswith(f"{path}: accelerator #3 'C': frameworks")


def test_valid_file_loads_in_order_with_its_values(tmp_path: Path) -> None:
    path = _write(tmp_path, _entry(name="Z9"), _entry(name="A1", vendor="AMD"))
    catalog = load_catalog(str(path))
    assert catalog.names == ("Z9", "A1")
    assert catalog["A1"].vendor == "AMD"
    assert catalog["Z9"].launch_date == date(2023, 3, 1)
    assert catalog["Z9"].frameworks == ("pytorch", "jax")


# ------------------------------------------------------------------ Accelerator


def test_peak_tflops_by_precision() -> None:
    catalog = default_catalog()
    h100, a100 = catalog["H100-SXM"], catalog["A100-SXM-80GB"]
    assert h100.peak_tflops("bf16") == h100.peak_tflops("fp16") == 989
    assert h100.peak_tflops("fp8") == 2 * 989  # fp8_support: twice the bf16 rate
    assert a100.peak_tflops("fp8") == 312  # no fp8: runs at the bf16 rate
    assert a100.peak_tflops("fp32") == 156  # TF32: NVIDIA fraction 0.5
    assert catalog["Gaudi3"].peak_tflops("fp8") == 1835  # fp8_tflops override
    assert catalog["MI355X"].peak_tflops("fp32") == 157.3  # fp32_tflops override
    assert catalog["V100-SXM2-16GB"].peak_tflops("bf16") == 15.7  # no bf16: fp32 rate
    assert catalog["V100-SXM2-16GB"].peak_tflops("fp16") == 125
    assert catalog["TPU-v5p"].peak_tflops("fp16") == pytest.approx(459 / 3)
    with pytest.raises(ValueError, match="unknown precision 'int8'"):
        h100.peak_tflops("int8")


def test_every_packaged_type_has_a_positive_peak_at_every_precision() -> None:
    for accelerator in default_catalog():
        rates = [accelerator.peak_tflops(p) for p in PRECISIONS]
        assert all(r > 0 for r in rates), accelerator.name
        assert accelerator.peak_tflops("fp32") <= accelerator.peak_tflops("bf16") or (
            not accelerator.bf16_support
        ), accelerator.name


def test_supports_checks_framework_and_precision() -> None:
    catalog = default_catalog()
    assert catalog["H100-SXM"].supports("jax", "fp8")
    assert not catalog["A100-SXM-80GB"].supports("pytorch", "fp8")
    assert not catalog["Gaudi2"].supports("jax", "bf16")  # framework not listed
    assert not catalog["TPU-v4"].supports("jax", "fp16")
    assert not catalog["T4"].supports("pytorch", "bf16")
    assert catalog["T4"].supports("pytorch", "fp16")
    assert all(catalog["TPU-v4"].supports(f, "fp32") for f in FRAMEWORKS)
    with pytest.raises(ValueError, match="unknown framework 'torch'"):
        catalog["H100-SXM"].supports("torch", "bf16")
    with pytest.raises(ValueError, match="unknown precision"):
        catalog["H100-SXM"].supports("pytorch", "FP8")


def test_accelerator_is_frozen_and_accepts_an_iso_date_string() -> None:
    accelerator = Accelerator(**{**VALID, "launch_date": "2024-02-29"})
    assert accelerator.launch_date == date(2024, 2, 29)
    with pytest.raises(pydantic.ValidationError):
        accelerator.memory_gb = 1  # type: ignore[misc]


# ------------------------------------------------------------------ Catalog


def test_getitem_suggests_close_names() -> None:
    with pytest.raises(KeyError, match="close names: H100-SXM"):
        default_catalog()["H100-SMX"]
    with pytest.raises(KeyError, match="no accelerator type 'zzz'"):
        default_catalog()["zzz"]


def test_catalog_rejects_duplicate_names() -> None:
    one = Accelerator(**VALID)
    with pytest.raises(CatalogError, match="duplicate accelerator names \\['X1'\\]"):
        Catalog([one, one])


def test_collection_protocol() -> None:
    catalog = default_catalog()
    assert len(catalog) == len(catalog.names) == len(list(catalog))
    assert [a.name for a in catalog] == list(catalog.names)
    assert "B200" in catalog and "B201" not in catalog
    assert list(catalog.vendors) == sorted(catalog.vendors)


def test_launched_by_date_and_datetime() -> None:
    catalog = default_catalog()
    by_2021 = {a.name for a in catalog.launched_by(date(2021, 1, 1))}
    assert "A100-SXM-80GB" in by_2021 and "H100-SXM" not in by_2021
    # the launch day itself counts, for a date and for a tz-aware datetime alike
    h100_day = catalog["H100-SXM"].launch_date
    assert catalog["H100-SXM"] in catalog.launched_by(h100_day)
    moment = datetime(h100_day.year, h100_day.month, h100_day.day, 23, tzinfo=UTC)
    assert catalog["H100-SXM"] in catalog.launched_by(moment)
    assert len(catalog.launched_by(date(2030, 1, 1))) == len(catalog)


def test_to_frame_and_price_vector() -> None:
    catalog = default_catalog()
    frame = catalog.to_frame()
    assert list(frame["name"]) == list(catalog.names)
    assert frame.loc[frame["name"] == "TPU-v5e", "frameworks"].item() == "pytorch;jax;tensorflow"
    assert frame["launch_date"].dtype.kind == "M"
    prices = catalog.price_vector(["TPU-v5e", "H100-SXM"])
    np.testing.assert_array_equal(prices, [1.20, 6.16])
    with pytest.raises(KeyError):
        catalog.price_vector(["H100"])
