#!/usr/bin/env python3
"""hostvar.py — where the spread of host-bound PyTorch rows comes from (issue 4's independent check).

Eager ResNet-50 at batch 1 is bound by the host's launch rate, and on the lent H100 machine it read anything
from 3.3 to 7.9 ms per call in different processes (docs/perf-log.md, steps 15-17). This separates the
candidate causes, one eager configuration timed many ways (what it found: perf-log step 26, the host CPU's own
speed varies up to 2.4x and launch-bound rows follow it):

  inproc   ROUNDS rounds in this process, 1 s apart: does it drift within one process?
  fresh    PROCS fresh interpreters (import torch each): the spread between processes
  fork     PROCS children forked after `import torch`, before CUDA is touched: a cheap fresh process?
  each measurement also times, in the same process right before, a pure-Python loop (no torch: if slow
  processes are slow there too, the host's CPU (core, clock, neighbour) is the cause, not CUDA or PyTorch) and
  2000 one-element `add_` launches (PyTorch's dispatch plus a CUDA launch, no model: if only these are slow, the
  launch path is), and reads the machine's steal time (hypervisor) over the timed window.

Output: one JSON object per line: {"how", "i", "ms" (median per call, pytorch_bench.py's event timer),
"wall_ms" (a wall clock around 100 back-to-back calls), "py_ms" (the pure-Python loop), "launch_us" (one tiny
op, dispatch + launch), "steal_ms" (all CPUs' steal time during the timed calls, /proc/stat), "cpu" (the core the
process ran on), "mhz" (that core's clock from /proc/cpuinfo)}, then a summary line per kind.

usage: hostvar.py [IMPL [MODEL [BATCH]]]   (IMPL: eager-fp32, eager-cl; default eager-fp32 resnet50 1)
       hostvar.py --one IMPL MODEL BATCH HOW I   (one measurement; used for the fresh processes)
"""
import json, os, statistics, subprocess, sys, time

ROUNDS, PROCS = 5, 6


def core_and_mhz():
    try:
        cpu = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[36])
        mhz = None
        cur = None
        for line in open("/proc/cpuinfo"):
            if line.startswith("processor"):
                cur = int(line.split(":")[1])
            elif line.startswith("cpu MHz") and cur == cpu:
                mhz = float(line.split(":")[1])
        return cpu, mhz
    except (OSError, ValueError, IndexError):
        return -1, None


def launch_us():
    import torch
    x = torch.zeros(1, device="cuda")
    for _ in range(200):
        x.add_(1)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / 2000 * 1e6


def steal_jiffies():
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8])  # "cpu user nice system idle iowait irq softirq steal ..."
    except (OSError, ValueError, IndexError):
        return 0


def setup(impl, model, batch):
    import torch
    from pytorch_bench import build
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    m = build(model, 1000, "imagenet").cuda().eval()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    if impl == "eager-cl":
        m = m.to(torch.bfloat16).to(memory_format=torch.channels_last)
        x = x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)

    def fn():
        with torch.no_grad():
            return m(x)
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    return fn


def measure(fn, how, i):
    import torch
    from pytorch_bench import host_probe_ms, time_cuda
    py = host_probe_ms()  # pytorch_bench.py's host probe, the same loop
    lu = launch_us()
    cpu, mhz = core_and_mhz()
    st0 = steal_jiffies()
    ms = statistics.median(time_cuda(fn, 5, 20))
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) * 10
    steal = (steal_jiffies() - st0) * 1000.0 / os.sysconf("SC_CLK_TCK")
    return {"how": how, "i": i, "ms": ms, "wall_ms": wall, "py_ms": py, "launch_us": lu, "steal_ms": steal,
            "cpu": cpu, "mhz": mhz}


def one(impl, model, batch, how, i):
    print(json.dumps(measure(setup(impl, model, batch), how, i)), flush=True)


def main():
    impl, model, batch = (sys.argv[1:] + ["eager-fp32", "resnet50", "1"][len(sys.argv) - 1:])[:3]
    here = os.path.dirname(os.path.abspath(__file__))
    rows = []
    for i in range(PROCS):  # fresh interpreters
        out = subprocess.run([sys.executable, os.path.join(here, "hostvar.py"), "--one", impl, model, batch,
                              "fresh", str(i)], capture_output=True, text=True, timeout=120).stdout
        for line in out.splitlines():
            if line.startswith("{"):
                rows.append(json.loads(line))
                print(line, flush=True)
    import torch  # noqa: F401  (imported before forking: the children skip the import, not CUDA's start)
    for i in range(PROCS):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                os.write(w, json.dumps(measure(setup(impl, model, int(batch)), "fork", i)).encode())
            finally:
                os._exit(0)
        os.close(w)
        data = b""
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
        os.close(r)
        os.waitpid(pid, 0)
        if data:
            rows.append(json.loads(data))
            print(data.decode(), flush=True)
    fn = setup(impl, model, int(batch))  # this process last: CUDA starts here, after the forks
    for i in range(ROUNDS):
        time.sleep(1)
        rows.append(measure(fn, "inproc", i))
        print(json.dumps(rows[-1]), flush=True)
    for how in ("fresh", "fork", "inproc"):
        ms = [r["ms"] for r in rows if r["how"] == how]
        py = [r["py_ms"] for r in rows if r["how"] == how]
        lu = [r["launch_us"] for r in rows if r["how"] == how]
        if ms:
            print(f"# {how:6s} {impl} {model} b{batch}: ms min {min(ms):.3f} median {statistics.median(ms):.3f} "
                  f"max {max(ms):.3f} (max/min {max(ms) / min(ms):.2f}); python loop {min(py):.1f}-{max(py):.1f} ms; "
                  f"launch {min(lu):.1f}-{max(lu):.1f} us", flush=True)
    ms = [r["ms"] for r in rows]
    for key in ("py_ms", "launch_us", "wall_ms"):  # does the host's speed explain the model's time?
        v = [r[key] for r in rows]
        if len(ms) > 2 and statistics.pstdev(ms) > 0 and statistics.pstdev(v) > 0:
            print(f"# correlation of ms with {key}: {statistics.correlation(ms, v):+.2f} over {len(ms)} measurements",
                  flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 7 and sys.argv[1] == "--one":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        one(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6]))
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        main()
