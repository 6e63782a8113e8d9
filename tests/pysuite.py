#!/usr/bin/env python3
"""Runs one Python test file with unittest and prints `PYSUITE passed=N failed=N skipped=N`."""
import importlib.util
import os
import sys
import unittest

path = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.dirname(path))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(path)), "lib"))
spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
suite = unittest.defaultTestLoader.loadTestsFromModule(module)
result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
skipped = len(result.skipped)
passed = result.testsRun - failed - skipped
print("PYSUITE passed=%d failed=%d skipped=%d" % (passed, failed, skipped), flush=True)
sys.exit(1 if failed else 0)
