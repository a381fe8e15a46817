"""Every behaviour under the resident drive gets the same verdict sandboxed and not
(tests/runner_case.py `SameVerdictsCase`; the one-shot drive's are tests/test_sandbox_oneshot.py).
"""

from __future__ import annotations

import unittest

from tests.runner_case import SameVerdictsCase


class ResidentSameVerdictsTest(SameVerdictsCase):
    drive = "resident"

    def test_every_behaviour_gets_the_same_verdict_sandboxed_and_not(self):
        self.assert_every_behaviour_gets_the_same_verdict_sandboxed_and_not()


if __name__ == "__main__":
    unittest.main()
