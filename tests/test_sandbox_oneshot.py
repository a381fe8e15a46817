"""Every behaviour under the one-shot drive gets the same verdict sandboxed and not
(tests/runner_case.py `SameVerdictsCase`; the resident drive's are tests/test_sandbox_resident.py).
"""

from __future__ import annotations

import unittest

from tests.runner_case import SameVerdictsCase


class OneShotSameVerdictsTest(SameVerdictsCase):
    drive = "oneshot"

    def test_every_behaviour_gets_the_same_verdict_sandboxed_and_not(self):
        self.assert_every_behaviour_gets_the_same_verdict_sandboxed_and_not()


if __name__ == "__main__":
    unittest.main()
