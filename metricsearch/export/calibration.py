"""400 generic product listings (title + description) made from the word lists below with a fixed seed: what an
export calibrates an int8 graph on, and measures it against fp32 on, when it is given no catalog. No third-party
text, so the package ships no one's data.

Product listings, because that is what the service ranks: brand names, model and part numbers, sizes, units and
specifications, short titles and longer descriptions. An int8 graph of all-MiniLM-L6-v2 calibrated on them keeps
0.958 of fp32's top-10 neighbours on them, and each shared catalog pair's MRR within 0.005 of fp32's (BENCHMARKS.md,
Encoder).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ITEMS = 400

BRANDS = [
    "Sony",
    "Samsung",
    "Panasonic",
    "Canon",
    "Nikon",
    "Philips",
    "Bose",
    "Logitech",
    "Garmin",
    "Pioneer",
    "Yamaha",
    "Denon",
    "Onkyo",
    "Sharp",
    "Toshiba",
    "LG",
    "Kenwood",
    "Belkin",
    "Netgear",
    "Linksys",
    "Cuisinart",
    "KitchenAid",
    "Hamilton-Beach",
    "Black+Decker",
    "DeWalt",
    "Bosch",
    "Makita",
    "Dyson",
    "Hoover",
    "Frigidaire",
    "Whirlpool",
    "Apple",
    "Microsoft",
    "HP",
    "Dell",
    "Lenovo",
    "Asus",
    "Acer",
    "Epson",
    "Brother",
    "JVC",
    "Klipsch",
    "Polk",
    "Sennheiser",
    "Olympus",
    "Fujifilm",
    "SanDisk",
    "Kingston",
    "Seagate",
    "Lexmark",
    "Oster",
    "Keurig",
    "Coleman",
    "Rubbermaid",
    "Fellowes",
    "Targus",
    "Case-Logic",
    "Monster",
]

KINDS = {
    "LCD HDTV": ["1080p", "120Hz refresh rate", "HDMI inputs", "{n}-inch screen", "contrast ratio {n},000:1"],
    "Blu-ray Disc Player": ["1080p upscaling", "BD-Live", "HDMI output", "Dolby TrueHD decoding", "Wi-Fi ready"],
    "Digital Camera": [
        "{n}.1 megapixel sensor",
        "{n}x optical zoom",
        "2.7-inch LCD",
        "image stabilization",
        "HD video",
    ],
    "Digital SLR Camera Body": [
        "CMOS sensor",
        "ISO 100-6400",
        "{n} fps continuous shooting",
        "live view",
        "SD card slot",
    ],
    "Camcorder": ["{n}GB flash memory", "{n}x optical zoom", "Full HD recording", "touch screen", "face detection"],
    "Home Theater System": ["{n}.1 channel", "{n} watts total power", "subwoofer", "iPod dock", "DVD playback"],
    "Bookshelf Speakers (Pair)": ["{n}-inch woofer", "silk dome tweeter", "{n} Hz - 20 kHz", "black ash finish"],
    "Noise Cancelling Headphones": ["over-ear", "{n} hours battery", "foldable design", "carrying case", "inline mic"],
    "Wireless Router": ["802.11n", "{n} Mbps", "4-port switch", "WPA2 security", "dual band 2.4/5 GHz"],
    "External Hard Drive": ["{n}TB", "USB 2.0", "7200 RPM", "backup software", "portable aluminum enclosure"],
    "USB Flash Drive": ["{n}GB", "USB 3.0", "retractable connector", "password protection", "keychain loop"],
    "Laser Printer": ["{n} ppm", "1200 x 1200 dpi", "duplex printing", "250-sheet tray", "Ethernet networking"],
    "All-in-One Inkjet Printer": ["print, copy, scan, fax", "{n} ppm black", "wireless", "photo printing", "ADF"],
    "Notebook Computer": ["Intel Core 2 Duo", "{n}GB DDR2 memory", "{n}0GB hard drive", "15.4-inch display", "DVD±RW"],
    "Wireless Mouse": ["laser tracking", "nano receiver", "{n} buttons", "2.4 GHz", "ambidextrous"],
    "GPS Navigator": ["4.3-inch widescreen", "text-to-speech", "lane assist", "preloaded maps", "{n} million POIs"],
    "Car Stereo Receiver": ["CD/MP3/WMA", "{n} watts x 4", "front AUX input", "detachable face", "USB port"],
    "Stand Mixer": ["{n}-quart bowl", "{n} speeds", "tilt-head design", "dough hook", "flat beater", "wire whip"],
    "Coffee Maker": [
        "{n}-cup carafe",
        "programmable timer",
        "auto shut-off",
        "brew strength control",
        "gold-tone filter",
    ],
    "Blender": ["{n} watts", "48-ounce glass jar", "pulse function", "ice crushing", "dishwasher-safe parts"],
    "Cordless Drill/Driver Kit": [
        "{n}-volt",
        "lithium-ion battery",
        "1/2-inch chuck",
        "two-speed gearbox",
        "LED light",
    ],
    "Bagless Upright Vacuum": ["HEPA filter", "{n}-amp motor", "cyclonic suction", "pet hair tool", "{n}-foot cord"],
    "Microwave Oven": ["{n}.2 cu. ft.", "1100 watts", "sensor cooking", "turntable", "stainless steel"],
    "Refrigerator": ["{n} cu. ft.", "ice maker", "French doors", "Energy Star", "adjustable glass shelves"],
    "Paper Shredder": ["cross-cut", "{n}-sheet capacity", "{n}-gallon basket", "jam proof", "credit card slot"],
    "Laptop Backpack": ["fits up to 16-inch laptops", "padded straps", "{n} compartments", "water-resistant nylon"],
    "Universal Remote Control": ["controls {n} devices", "LCD screen", "backlit keys", "learning function"],
    "Surge Protector": ["{n} outlets", "{n}000 joules", "coaxial protection", "6-foot cord", "LED indicators"],
    "Memory Card": ["{n}GB SDHC", "Class 10", "up to {n}0MB/s", "shockproof", "lifetime warranty"],
    "Turntable": ["belt drive", "33 1/3 and 45 RPM", "built-in phono preamp", "USB output", "dust cover"],
}

COLORS = [
    "Black",
    "Silver",
    "White",
    "Red",
    "Blue",
    "Gray",
    "Titanium",
    "Stainless",
    "Graphite",
    "Pink",
    "Green",
    "Espresso",
]
PHRASES = [
    "Designed for everyday use at home or in the office.",
    "Includes a {n}-year limited warranty.",
    "Easy setup in minutes.",
    "Compact design saves space.",
    "Energy efficient and quiet operation.",
    "Package contents: unit, power adapter, quick start guide.",
    "Compatible with Windows and Mac OS X.",
    "Ships in frustration-free packaging.",
    "Model {model}.",
    "Dimensions: {n}.5 x {n} x {n}.2 inches; weight {n}.4 lbs.",
    "Great value for the price!",
    "Replaces part number {model}.",
    "The perfect gift for family and friends.",
    "Enjoy crisp, clear sound and rich bass.",
    "Stylish finish that complements any decor.",
]


def model_number(rng: np.random.Generator) -> str:
    letters = "".join(rng.choice(list("ABCDEFGHJKLMNPRSTVWXZ"), size=int(rng.integers(1, 4))))
    digits = str(int(rng.integers(10, 99999)))
    suffix = "".join(rng.choice(list("ABSWX"), size=int(rng.integers(0, 3))))
    joiner = str(rng.choice(["", "-", " "]))
    return f"{letters}{joiner}{digits}{suffix}"


def listing(rng: np.random.Generator) -> dict:
    brand = str(rng.choice(BRANDS))
    kind = str(rng.choice(list(KINDS)))
    model = model_number(rng)
    features = [f.format(n=int(rng.integers(2, 9))) for f in rng.permutation(KINDS[kind])]
    color = str(rng.choice(COLORS))
    title_forms = (
        f"{brand} {kind} {model}",
        f"{brand} {model} {kind} - {color}",
        f"{brand} {features[0]} {kind} ({model})",
        f"{kind} by {brand}, {color}",
    )
    title = title_forms[int(rng.integers(0, len(title_forms)))]
    shown = features[: int(rng.integers(1, len(features) + 1))]
    sentences = [f"The {brand} {model} {kind.lower()} offers {', '.join(shown)}."]
    for phrase in rng.choice(PHRASES, size=int(rng.integers(0, 5)), replace=False):
        sentences.append(str(phrase).format(n=int(rng.integers(1, 9)), model=model))
    if rng.random() < 0.3:
        sentences.append(" ".join(f"{f.capitalize()}." for f in features))
    description = "" if rng.random() < 0.1 else " ".join(sentences)
    return {"title": title, "description": description}


def write(path: Path) -> Path:
    """The listings as a JSONL catalog at `path`."""
    rng = np.random.default_rng(2026)
    with path.open("w", encoding="utf-8") as out:
        for n in range(ITEMS):
            out.write(json.dumps({"id": f"cal{n}", **listing(rng)}) + "\n")
    return path
