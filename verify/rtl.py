"""Runs of the verification benches (verify/cocotb_verify.py) on the RTL, through the
project's Verilator runner (rtlbench/runner.py), and the model's runs of the same streams."""
import asyncio
import json

from rtlbench import runner, stream

from .settings import VerifySettings

OUT = runner.BUILD / "verify"


def run_rtl(testcase, config="default", count=100, seed=1, backend="fast", env=None):
    """Run cocotb_verify.<testcase> on the RTL; returns the record it wrote."""
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"{testcase}-{config}-{backend}-{seed}-{count}.json"
    out.unlink(missing_ok=True)
    run = runner.run_fast if backend == "fast" else runner.run
    run("verify.cocotb_verify", testcase=testcase, config=config,
        env={**VerifySettings(config=config, seed=seed, count=count, out=str(out)).env(),
             "COCOTB_LOG_LEVEL": "WARNING", **(env or {})})
    return json.loads(out.read_text())


def model_stream_records(cfg, seed, count):
    """rtlbench/stream.py's stream of (seed, count) on the model, host data through its
    backdoor as on the fast path: one record per descriptor."""
    from driver import NdpDevice
    from driver.model_transport import ModelTransport

    async def main():
        dev = await NdpDevice.open(ModelTransport(cfg, backdoor_memory=True))
        queues = await stream.configure(dev, cfg)
        return await stream.run(dev, queues, stream.generate(seed, count, cfg), seed)
    return asyncio.run(main())
