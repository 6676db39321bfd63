"""main_server's check of one tool image, as CONTRACT.md rule 7 describes
it, timed on the files given (the baseline of bench/images.sh).

Strict base64 decoding (the image arrives as base64), the JPEG/PNG magic,
Image.open and its format, the pixel cap, verify(), then a second open and
a full load(). Prints the median of 25 runs per file as key=value lines.
"""
import base64
import io
import statistics
import sys
import time

from PIL import Image

MAX_PIXELS = 3840 * 2160


def main_server_accepts(b64: str) -> bool:
    try:
        raw = base64.b64decode(b64, validate=True)
    except ValueError:
        return False
    expected = "PNG" if raw.startswith(b"\x89PNG\r\n\x1a\n") else "JPEG" if raw.startswith(b"\xff\xd8") else None
    if expected is None:
        return False
    try:
        with Image.open(io.BytesIO(raw)) as img:
            if img.format != expected or img.width * img.height > MAX_PIXELS:
                return False
            img.verify()
        with Image.open(io.BytesIO(raw)) as img:
            img.load()
    except Exception:
        return False
    return True


def median_ms(b64: str, rounds: int = 25):
    times = []
    verdict = None
    for _ in range(rounds):
        t = time.perf_counter()
        verdict = main_server_accepts(b64)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, verdict


def main() -> None:
    for key, path in (("clean", sys.argv[1]), ("broken", sys.argv[2])):
        with open(path, "rb") as f:
            b64 = base64.b64encode(f.read()).decode("ascii")
        ms, accepted = median_ms(b64)
        print(f"{key}_ms={ms:.3f}")
        print(f"{key}_accepted={accepted}")


if __name__ == "__main__":
    main()
