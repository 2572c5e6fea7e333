"""verify/ on the model: fuzzing reaches every status and catches a device that writes
where it may not or answers a wrong status; the soak's bookkeeping counts what is lost,
duplicated or different."""
import asyncio

import pytest

import isa
from isa import Status, slots
from rtlbench.backend import ModelBackend
from verify import fuzz, soak


def fuzz_model(count, seed=1, patch=None):
    async def main():
        env = await ModelBackend.start("default")
        if patch:
            patch(env.model)
        return await fuzz.run(env, count, seed)
    return asyncio.run(main())


def test_fuzz_reaches_every_decode_status_and_each_kind():
    result = fuzz_model(1500, seed=4)
    assert result.count == 1500
    for status in (Status.OK, Status.BAD_OP, Status.BAD_DTYPE, Status.BOUNDS, Status.BAD_SHAPE):
        assert result.by_status.get(int(status), 0) >= 20, (status, result.by_status)
    assert set(result.by_kind) == set(fuzz.KINDS)


def test_fuzz_words_are_the_same_for_the_same_seed():
    cfg = isa.load_config("default")
    first = [c.desc for c in fuzz.cases(cfg, 7, 200)]
    assert first == [c.desc for c in fuzz.cases(cfg, 7, 200)]
    assert first != [c.desc for c in fuzz.cases(cfg, 8, 200)]


def test_fuzz_catches_a_stray_write():
    def stray(model):
        write = model._write

        def writes_one_byte_more(writes):
            write(writes)
            model.memory.write(fuzz.SPAN - 1, b"\x5a")     # the guard after queue 0's data
        model._write = writes_one_byte_more
    with pytest.raises(AssertionError, match="outside every ring and data range"):
        fuzz_model(60, patch=stray)


def test_fuzz_catches_a_store_that_writes_the_wrong_bytes():
    def skewed(model):
        write = model._write

        def writes_shifted(writes):
            write([(addr + 64 if fuzz.DATA <= addr % fuzz.SPAN < fuzz.DATA_END else addr, data)
                   for addr, data in writes])
        model._write = writes_shifted
    with pytest.raises(AssertionError, match="written by no OK STORE"):
        fuzz_model(300, patch=skewed)


def test_fuzz_catches_a_wrong_status():
    def lenient(model):
        execute = model.control.execute

        def accepts_bad_dtype(entry, *args, **kwargs):
            schedule, state = execute(entry, *args, **kwargs)
            if schedule.status == Status.BAD_DTYPE:          # the completion line says OK
                addr, line = schedule.header
                line = line[:slots.CQ_STATUS] + bytes(4) + line[slots.CQ_STATUS + 4:]
                schedule.status, schedule.header = Status.OK, (addr, line)
            return schedule, state
        model.control.execute = accepts_bad_dtype
    with pytest.raises(AssertionError, match="the decode rules say BAD_DTYPE"):
        fuzz_model(300, patch=lenient)


def test_soak_bookkeeping():
    record = {"queue": 0, "seq": 1, "status": "OK", "result": "00"}
    model = [record, {**record, "seq": 2}, {**record, "queue": 1}]
    assert soak.compare(model, model, [2, 1], 2) == (0, 0, 0)
    assert soak.compare(model, model[:2], [2, 0], 2) == (2, 0, 0)        # a record and a pulse missing
    assert soak.compare(model, model, [3, 1], 2) == (0, 1, 0)            # a completion twice
    assert soak.compare(model, [record, {**record, "seq": 2, "result": "01"}, model[2]], [2, 1], 2) == (0, 0, 1)
