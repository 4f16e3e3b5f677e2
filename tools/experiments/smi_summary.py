"""Summary of nvidia-smi samples (next_device_run.sh part clock): the busier half's SM clock and
power. Usage: smi_summary.py SAMPLES.csv NAME US, the samples as
timestamp, clocks.sm, clocks.mem, power.draw, temperature.gpu, clocks_throttle_reasons.active."""
import sys


def main(path, name, us):
    samples = []
    for line in open(path):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 6:
            continue
        try:
            samples.append((float(fields[3]), int(fields[1]), fields[5]))
        except ValueError:
            continue
    if not samples:
        print(f"{name} us {us} no samples")
        return
    busy = sorted(samples, reverse=True)[: max(1, len(samples) // 2)]
    clocks = sorted(c for _, c, _ in busy)
    watts = sorted(w for w, _, _ in busy)
    reasons = sorted({r for _, _, r in busy})
    print(f"{name} us {float(us):.1f} samples {len(samples)} busy half: SM clock median "
          f"{clocks[len(clocks) // 2]} min {clocks[0]} MHz, power median {watts[len(watts) // 2]:.0f} "
          f"max {watts[-1]:.0f} W, reasons {reasons}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
