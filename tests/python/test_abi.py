"""The ctypes declarations of oomless._native have the layouts of the library's structs, start
at the version they were written for, and the package states the major version it needs."""
import ctypes
import unittest

from oomless import _native as n


class AbiTest(unittest.TestCase):
    def test_sizes_match_the_library(self):
        self.assertTrue(n.STRUCTS)
        for cls in n.STRUCTS:
            with self.subTest(struct=cls.c_name):
                size = n.oom_struct_size(cls.c_name.encode())
                self.assertNotEqual(size, 0, "%s: the library does not know it" % cls.c_name)
                self.assertEqual(ctypes.sizeof(cls), size,
                                 "%s: ctypes declares %d bytes, the library has %d: update its "
                                 "_fields_ in _native.py" % (cls.c_name, ctypes.sizeof(cls), size))

    def test_version_is_the_first_member(self):
        for cls in n.STRUCTS:
            with self.subTest(struct=cls.c_name):
                self.assertEqual(cls._fields_[0][0], "version")
                self.assertEqual(cls.version.offset, 0)
                self.assertEqual(cls().version, cls.c_version)

    def test_arguments_fill_the_fields_after_the_version(self):
        req = n.TargetRequest(b"a100-80gb", b"24")
        self.assertEqual(req.version, 1)
        self.assertEqual(req.gpu, b"a100-80gb")
        self.assertEqual(req.vram, b"24")
        self.assertIsNone(req.margin)

    def test_a_struct_of_an_unknown_version_is_refused(self):
        est = n.Estimate()
        est.version = 999
        handle = ctypes.c_void_p()
        self.assertEqual(n.oom_workload_create(ctypes.byref(handle)), 0)
        try:
            self.assertEqual(n.oom_workload_set(handle, b"model", b"llama-3.1-8b"), 0)
            self.assertEqual(n.oom_estimate_run(ctypes.byref(est), handle), 1)  # OOM_EINVAL
            self.assertIn(b"oom_estimate: version 999", n.oom_last_message())
            est.version = n.Estimate.c_version
            self.assertEqual(n.oom_estimate_run(ctypes.byref(est), handle), 0)
            self.assertGreater(est.device_peak, 0)
        finally:
            n.oom_workload_free(handle)

    def test_major_version(self):
        self.assertEqual(n.MAJOR, 1)
        self.assertEqual(n.lib.oom_version_number() // 10000, n.MAJOR)


if __name__ == "__main__":
    unittest.main()
