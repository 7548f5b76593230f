"""Run 145: cuOccupancyMaxActiveClusters for the cluster forward kernel, with clusters of 1, 2, 4 and 8.

    PYTHONPATH=$PWD python tools/runs/run145/max_clusters.py
"""

import ctypes

import torch
import triton

from ln_tutorial import launch


class Dim(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class Value(ctypes.Union):  # CUlaunchAttributeValue: 64 bytes
    _fields_ = [("pad", ctypes.c_char * 64), ("cluster_dim", Dim)]


class Attribute(ctypes.Structure):  # CUlaunchAttribute
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", Value)]


class Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(Attribute)), ("num_attrs", ctypes.c_uint)]


CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
libcuda = ctypes.CDLL("libcuda.so.1")
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
      f"SMs {torch.cuda.get_device_properties(0).multi_processor_count}", flush=True)
for warps in (32, 16):
    n = 65536
    x = torch.randn(64, n, device="cuda", dtype=torch.bfloat16)
    cfg = launch.forward_config(n, 2)._replace(num_warps=warps)
    launch.layer_norm_forward(x, None, None, 1e-5, config=cfg)
    torch.cuda.synchronize()
    launcher = launch._forward_launcher(cfg, x.dtype)
    _, function, (num_warps, _, shared), *_ = next(iter(launcher.compiled.values()))
    for size in (1, 2, 4, 8):
        attribute = Attribute(id=CLUSTER_DIMENSION)
        attribute.value.cluster_dim = Dim(size, 1, 1)
        config = Config((ctypes.c_uint * 3)(4096, 1, 1), (ctypes.c_uint * 3)(32 * num_warps, 1, 1), shared, None,
                        ctypes.pointer(attribute), 1)
        count = ctypes.c_int(-1)
        status = libcuda.cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(function),
                                                      ctypes.byref(config))
        print(f"{num_warps} warps, {shared} bytes shared, clusters of {size}: status {status}, "
              f"at most {count.value} active ({count.value * size} programs)", flush=True)
