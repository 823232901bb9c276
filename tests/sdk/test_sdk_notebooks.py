"""The example notebooks and the notebook runner: each notebook runs cleanly in
a real sandbox, with its outputs written back as nbformat outputs and its
produced files downloadable."""
import struct
import subprocess
import sys

import nbformat
import openpyxl
import pytest

from sdk_support import NOTEBOOKS, run_cli
from cellgate.notebook_runner import local_path, run_notebook

EXAMPLES = ["csv_analysis", "excel_pivot", "image_processing"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def tagged(nb, tag):
    return [c for c in nb.cells if tag in c.metadata.get("tags", [])]


def output_types(cell):
    return [o.output_type for o in cell.outputs]


def assert_executed_cleanly(nb):
    nbformat.validate(nb)
    for cell in code_cells(nb):
        assert isinstance(cell.execution_count, int), cell.source[:60]
        assert "error" not in output_types(cell), [o for o in cell.outputs if o.output_type == "error"]
        for o in cell.outputs:
            if o.output_type == "stream":
                assert o.name in ("stdout", "stderr")
            if o.output_type == "execute_result":
                assert o.execution_count == cell.execution_count
    counts = [c.execution_count for c in code_cells(nb)]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)


def png_size(data):
    assert data.startswith(PNG_MAGIC)
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    return width, height, colour


# --- the committed notebooks and data (no gateway needed) -------------------------------------

@pytest.mark.parametrize("name", EXAMPLES)
def test_committed_notebooks_are_clean_and_declare_inputs(name):
    nb = nbformat.read(str(NOTEBOOKS / f"{name}.ipynb"), as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    for cell in code_cells(nb):
        assert cell.outputs == [] and cell.execution_count is None
    inputs = nb.metadata["cellgate"]["inputs"]
    assert inputs and all((NOTEBOOKS / p).is_file() for p in inputs)


def test_datasets_match_their_generator():
    r = subprocess.run(["/usr/bin/python3", str(NOTEBOOKS / "data" / "make_datasets.py"), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


# --- running them --------------------------------------------------------------------------------

def test_csv_analysis(gateway, tmp_path):
    run = run_notebook(NOTEBOOKS / "csv_analysis.ipynb", gateway.url, gateway.token,
                       output=tmp_path / "csv.ipynb", download_dir=tmp_path / "files")
    assert run.ok, run.errors
    nb = nbformat.read(str(tmp_path / "csv.ipynb"), as_version=4)
    assert_executed_cleanly(nb)
    chart = tagged(nb, "chart")[0]
    images = [o for o in chart.outputs if o.output_type == "display_data" and "image/png" in o.data]
    assert len(images) == 1
    import base64
    assert base64.b64decode(images[0].data["image/png"]).startswith(PNG_MAGIC)
    tables = [o for c in code_cells(nb) for o in c.outputs if o.output_type == "execute_result"]
    assert any("text/html" in o.data and "<table" in o.data["text/html"] for o in tables)
    stdout = "".join(o.text for c in code_cells(nb) for o in c.outputs if o.output_type == "stream")
    assert "Best month:" in stdout and "revenue 2025 vs 2024" in stdout
    saved = (tmp_path / "files" / "out" / "revenue_by_region.png").read_bytes()
    assert png_size(saved)[:2] == (900, 450)


def test_excel_pivot_writes_a_pivot_workbook(gateway, tmp_path):
    run = run_notebook(NOTEBOOKS / "excel_pivot.ipynb", gateway.url, gateway.token,
                       output=tmp_path / "xlsx.ipynb", download_dir=tmp_path / "files")
    assert run.ok, run.errors
    assert "out/orders_pivot.xlsx" in run.produced
    nb = nbformat.read(str(tmp_path / "xlsx.ipynb"), as_version=4)
    assert_executed_cleanly(nb)
    pivot_cell = tagged(nb, "pivot")[0]
    assert output_types(pivot_cell) == ["execute_result"]

    # The expected pivot, computed here from the committed input.
    source = openpyxl.load_workbook(NOTEBOOKS / "data" / "orders.xlsx").active
    rows = list(source.iter_rows(min_row=2, values_only=True))
    expected = {}
    for _, _, region, _, category, _, _, total in rows:
        expected[(region, category)] = expected.get((region, category), 0) + total

    wb = openpyxl.load_workbook(tmp_path / "files" / "out" / "orders_pivot.xlsx")
    assert wb.sheetnames == ["pivot", "by_salesperson"]
    ws = wb["pivot"]
    grid = [list(r) for r in ws.iter_rows(values_only=True)]
    header = next(r for r in grid if "Hardware" in r)
    columns = {name: i for i, name in enumerate(header) if name}
    assert {"Hardware", "Services", "Software", "Total"} <= set(columns)
    body = {r[0]: r for r in grid if r[0] in ("North", "South", "East", "West", "Total")}
    assert set(body) == {"North", "South", "East", "West", "Total"}
    for (region, category), total in expected.items():
        assert body[region][columns[category]] == pytest.approx(total, abs=0.01)
    assert body["Total"][columns["Total"]] == pytest.approx(sum(r[7] for r in rows), abs=0.01)
    assert ws.cell(row=1, column=2).font.bold
    people = list(wb["by_salesperson"].iter_rows(values_only=True))
    assert people[0] == ("region", "salesperson", "orders", "revenue")
    assert sum(r[2] for r in people[1:]) == len(rows)


def test_image_processing(gateway, tmp_path):
    run = run_notebook(NOTEBOOKS / "image_processing.ipynb", gateway.url, gateway.token,
                       output=tmp_path / "img.ipynb", download_dir=tmp_path / "files")
    assert run.ok, run.errors
    nb = nbformat.read(str(tmp_path / "img.ipynb"), as_version=4)
    assert_executed_cleanly(nb)
    original = tagged(nb, "original")[0]
    assert any(o.output_type == "execute_result" and "image/png" in o.data for o in original.outputs)
    assert any("image/png" in o.get("data", {}) for o in tagged(nb, "chart")[0].outputs)
    out = tmp_path / "files" / "out"
    assert png_size((out / "photo_gray.png").read_bytes()) == (320, 240, 0)      # colour type 0: grayscale
    assert png_size((out / "photo_small.png").read_bytes()) == (160, 120, 2)     # RGB
    assert png_size((out / "photo_edges.png").read_bytes())[:2] == (320, 240)
    assert (out / "photo_thumb.jpg").read_bytes()[:3] == b"\xff\xd8\xff"


def test_runner_stops_at_the_first_error_unless_allowed(gateway, tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("print('one')"),
        nbformat.v4.new_markdown_cell("text"),
        nbformat.v4.new_code_cell("raise RuntimeError('cell two broke')"),
        nbformat.v4.new_code_cell("print('three')"),
    ])
    (tmp_path / "extra.txt").write_text("uploaded by flag")
    nb.cells.insert(0, nbformat.v4.new_code_cell("print(open('extra.txt').read())"))
    path = tmp_path / "broken.ipynb"
    nbformat.write(nb, str(path))

    stopped = run_notebook(path, gateway.url, gateway.token, uploads=[(tmp_path / "extra.txt", "extra.txt")],
                           output=tmp_path / "stopped.ipynb")
    assert not stopped.ok and [i for i, _ in stopped.errors] == [3]
    assert stopped.errors[0][1]["ename"] == "RuntimeError"
    done = nbformat.read(str(tmp_path / "stopped.ipynb"), as_version=4)
    first, one, _, two, three = done.cells
    assert first.outputs[0].text == "uploaded by flag\n"
    assert one.outputs[0].text == "one\n"
    assert output_types(two) == ["error"] and two.outputs[0].ename == "RuntimeError"
    assert three.outputs == [] and three.execution_count is None

    allowed = run_notebook(path, gateway.url, gateway.token, uploads=[(tmp_path / "extra.txt", "extra.txt")],
                           output=tmp_path / "allowed.ipynb", allow_errors=True)
    assert [i for i, _ in allowed.errors] == [3]
    assert nbformat.read(str(tmp_path / "allowed.ipynb"), as_version=4).cells[4].outputs[0].text == "three\n"

    # The CLI reports the failure and exits 1.
    r = run_cli(gateway, "notebook", "run", path, "--upload", f"{tmp_path / 'extra.txt'}:extra.txt",
                "--output", tmp_path / "cli.ipynb")
    assert r.returncode == 1 and "cell two broke" in r.stderr, (r.stdout, r.stderr)
    assert (tmp_path / "cli.ipynb").exists()


def test_cli_notebook_run(gateway, tmp_path):
    r = run_cli(gateway, "notebook", "run", NOTEBOOKS / "excel_pivot.ipynb", "--output", tmp_path / "out.ipynb",
                "--download-dir", tmp_path / "files")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert_executed_cleanly(nbformat.read(str(tmp_path / "out.ipynb"), as_version=4))
    assert (tmp_path / "files" / "out" / "orders_pivot.xlsx").exists()
    assert "uploaded" in r.stderr and "data/orders.xlsx" in r.stderr
    # The committed notebook itself was not touched.
    committed = nbformat.read(str(NOTEBOOKS / "excel_pivot.ipynb"), as_version=4)
    assert all(c.outputs == [] for c in code_cells(committed))
    assert sys.version_info >= (3, 9)


def test_downloads_keep_to_the_download_dir_on_every_system(tmp_path):
    """Review L10: the kernel names the files; a name that would leave the
    download dir on Windows (a drive, a stream, a device) is not downloaded."""
    import os
    assert local_path(str(tmp_path), "out/plot.png") == os.path.join(str(tmp_path), "out", "plot.png")
    for bad in ["C:x", "out/C:evil", "a\\..\\b", "../up", "/etc/passwd", "nul", "NUL.txt", "out/com1.csv",
                "lpt9", "trailing.", "space ", "x\0y", ""]:
        assert local_path(str(tmp_path), bad) is None, bad
    assert local_path(str(tmp_path), "console.txt") is not None  # only the exact device names
