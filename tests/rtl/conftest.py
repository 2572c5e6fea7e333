"""One simulator launch for many pytest items.

Starting a simulation (the Verilated model, cocotb, the bench's imports) costs about 4 s,
more than most scenarios take to run, so the items of test_rtl.py and test_fast.py that
share a top, a cocotb module, a config and an environment run in one launch: the first
of them starts it with every selected item's test (so `-k` still runs only what it
selects), and each item then reads its own test's result. A test that failed there is
rerun alone through rtlbench/runner.py's run() or run_fast(), which gives its message,
seed and (NDP_WAVES=fail) waveform; one that failed in the launch and passes alone fails
too, since it depends on what ran before it."""
import pytest

from rtlbench import runner


class Launches:
    def __init__(self, session):
        self.session, self.passed = session, {}

    @staticmethod
    def launch_of(item):
        """(fast, module, testcase, config, env) of an item whose test module says how it runs."""
        launch_of = getattr(item.module, "launch_of", None)
        if launch_of is None or not hasattr(item, "callspec") or item.originalname not in ("test_fast",
                                                                                            "test_scenarios_on_rtl"):
            return None
        return launch_of(**item.callspec.params)

    def run(self, fast, module, testcase, config, env=None):
        __tracebackhide__ = True
        key = (fast, module, config, tuple(sorted((env or {}).items())))
        if key not in self.passed:
            names = []
            for item in self.session.items:
                launch = self.launch_of(item)
                if launch and (launch[0], launch[1], launch[3], tuple(sorted((launch[4] or {}).items()))) == key \
                        and launch[2] not in names:
                    names.append(launch[2])
            self.passed[key] = (runner.run_each(fast, module, names, config, env) if len(names) > 1
                                else {})
        together = self.passed[key]
        if together.get(testcase):
            return
        alone = runner.run_fast if fast else runner.run
        alone(module, testcase=testcase, config=config, env=env)      # raises with the failure
        if together:
            pytest.fail(f"{testcase} failed in one launch with {', '.join(together)} on {config} but passes "
                        f"alone: it depends on a test run before it (rtlbench/runner.py run_each)")


@pytest.fixture(scope="session")
def launches(request):
    return Launches(request.session)
