#!/usr/bin/python3
"""Generates the example notebooks' datasets, deterministically (the same
bytes on every run, so the committed files can be checked against it):

- sales.csv    monthly sales by region and product, 2024-2025 (stdlib csv)
- orders.xlsx  an order log to pivot (openpyxl: Debian's python3-openpyxl)
- photo.png    a 320x240 RGB picture to process (stdlib zlib, no Pillow needed)

    /usr/bin/python3 notebooks/data/make_datasets.py [--check]

--check regenerates in memory and exits 1 if a committed file differs.
"""
import csv
import io
import math
import random
import struct
import sys
import zipfile
import zlib
from datetime import date, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261130
REGIONS = ["North", "South", "East", "West"]
PRODUCTS = {"Widgets": 12.5, "Gadgets": 24.0, "Gizmos": 7.25}


def make_sales_csv():
    rng = random.Random(SEED)
    base = {"North": 420, "South": 310, "East": 520, "West": 380}
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["month", "region", "product", "units", "revenue"])
    for year in (2024, 2025):
        for month in range(1, 13):
            season = 1 + 0.25 * math.sin((month - 3) / 12 * 2 * math.pi)   # peaks in June
            growth = 1 + 0.08 * (year - 2024) + 0.004 * month
            for region in REGIONS:
                for product, price in PRODUCTS.items():
                    units = round(base[region] * season * growth * rng.uniform(0.8, 1.2)
                                  * (1.4 if product == "Gizmos" else 1.0))
                    w.writerow([f"{year}-{month:02d}", region, product, units, f"{units * price:.2f}"])
    return out.getvalue().encode()


def _deterministic_zip(data):
    """Rewrites a zip with fixed timestamps and order (openpyxl stamps 'now')."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            info = zipfile.ZipInfo(item.filename, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            dst.writestr(info, src.read(item.filename))
    return out.getvalue()


def make_orders_xlsx():
    from openpyxl import Workbook

    rng = random.Random(SEED + 1)
    people = {"North": ["Ana", "Bo"], "South": ["Chen", "Dee"], "East": ["Eli", "Fay"], "West": ["Gus", "Hana"]}
    categories = {"Hardware": (40, 400), "Software": (20, 250), "Services": (100, 900)}
    wb = Workbook()
    ws = wb.active
    ws.title = "orders"
    ws.append(["order_id", "date", "region", "salesperson", "category", "quantity", "unit_price", "total"])
    for i in range(1, 241):
        d = date(2025, 1 + (i - 1) * 12 // 240, 1 + rng.randrange(28))
        region = rng.choice(REGIONS)
        category = rng.choice(sorted(categories))
        lo, hi = categories[category]
        qty = rng.randint(1, 20)
        price = round(rng.uniform(lo, hi), 2)
        ws.append([f"SO-{i:04d}", d, region, rng.choice(people[region]), category, qty, price,
                   round(qty * price, 2)])
    for col, width in zip("ABCDEFGH", (10, 12, 9, 12, 11, 9, 11, 11)):
        ws.column_dimensions[col].width = width
    for row in ws.iter_rows(min_row=2, min_col=2, max_col=2):
        row[0].number_format = "yyyy-mm-dd"
    fixed = datetime(2026, 1, 1)
    wb.properties.created = fixed
    wb.properties.modified = fixed
    wb.properties.creator = "cellgate make_datasets.py"
    buf = io.BytesIO()
    wb.save(buf)
    return _deterministic_zip(buf.getvalue())


def _png(width, height, pixel):
    """An 8-bit RGB PNG; pixel(x, y) -> (r, g, b)."""
    rows = bytearray()
    for y in range(height):
        rows.append(0)  # filter: none
        for x in range(width):
            rows.extend(pixel(x, y))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(rows), 9)) + \
        chunk(b"IEND", b"")


def make_photo_png():
    """A landscape: sky gradient, a sun, two hills, a lake with stripes of texture."""
    w, h = 320, 240

    def clamp(v):
        return max(0, min(255, int(v)))

    def pixel(x, y):
        hill1 = 150 + 30 * math.sin(x / 45.0)
        hill2 = 170 + 20 * math.sin(x / 23.0 + 1.3)
        if (x - 240) ** 2 + (y - 60) ** 2 < 28 ** 2:
            return (255, 214, 64)                                   # sun
        if y > 200:
            ripple = 18 * math.sin(x / 6.0 + y / 2.0)
            return (clamp(30 + ripple), clamp(90 + ripple), clamp(160 + ripple))   # lake
        if y > hill2:
            shade = (y - hill2) * 1.5
            return (clamp(40 + shade), clamp(120 - shade / 2), clamp(45))           # near hill
        if y > hill1:
            return (clamp(70 + (x % 16) * 2), clamp(140 + (y % 8) * 3), 70)        # far hill, textured
        t = y / 150.0
        return (clamp(90 + 110 * t), clamp(150 + 80 * t), clamp(235 - 10 * t))     # sky

    return _png(w, h, pixel)


DATASETS = {"sales.csv": make_sales_csv, "orders.xlsx": make_orders_xlsx, "photo.png": make_photo_png}


def main(argv):
    check = "--check" in argv
    stale = []
    for name, make in DATASETS.items():
        data = make()
        target = HERE / name
        if check:
            if not target.exists() or target.read_bytes() != data:
                stale.append(name)
        else:
            target.write_bytes(data)
            print(f"{target.relative_to(HERE.parent.parent)}: {len(data)} bytes")
    if stale:
        print("out of date (run notebooks/data/make_datasets.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
