"""The compatibility chain's data, per Neuron SDK release and per NGC Triton release, each link with its source:
the kernels the Neuron driver was tested on and the kernels that break it, the runtime's driver range, the NEFF
versions and compilers, the framework builds, Inf1 support, and NGC Triton's CUDA and minimum driver branch.

Data only; the rules that read it are :mod:`tritonfleet.compat`'s (which re-exports every name here). Adding
a release is one entry in :data:`CHAIN` or :data:`NGC_TRITON` (docs/compatibility.md "Extending").
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Verdicts of a :class:`Finding`, from best to worst.
OK = "ok"
WARN = "warn"
FAIL = "fail"
VERDICTS = (OK, WARN, FAIL)

#: The links of the chain (:attr:`Finding.link`, the keys of :attr:`ReleaseChain.sources`).
KERNEL_DRIVER = "kernel→driver"
DRIVER_RUNTIME = "driver→runtime"
RUNTIME_MODEL = "runtime→model"
FRAMEWORK_RUNTIME = "framework→runtime"
GPU_DRIVER_IMAGE = "gpu driver→image"
#: Every Neuron release row names these links; :data:`INF1` is the row's Inf1 support, also cited.
NEURON_LINKS = (KERNEL_DRIVER, DRIVER_RUNTIME, RUNTIME_MODEL, FRAMEWORK_RUNTIME)
INF1 = "inf1"

NEURONX_CC = "neuronx-cc"
NEURON_CC = "neuron-cc"
TORCH_NEURONX = "torch-neuronx"
TORCH_NEURON = "torch-neuron"
TENSORFLOW_NEURON = "tensorflow-neuron"
#: Compilers: the NEFFs of neuron-cc run on NeuronCore-v1 (inf1) only, those of neuronx-cc on NeuronCore-v2
#: and later only (SDK:frameworks/torch/guide-torch-neuron-vs-torch-neuronx-inference.rst).
COMPILER_ARCHS: dict[str, tuple[str, ...]] = {NEURON_CC: ("inf1",), NEURONX_CC: ("inf2", "trn1", "trn2")}
#: Packages that belong to Inf1 (they bring their own runtime; SDK:archive/appnotes/neuron1x/introducing-libnrt.rst).
INF1_PACKAGES = (NEURON_CC, TORCH_NEURON, TENSORFLOW_NEURON)
#: How many leading parts of a package version name its Neuron build: compilers by major.minor (2.27.5334.0 ->
#: 2.27); framework extensions ``[X.Y.Z].[A.B.C]`` (SDK:about-neuron/sdk-policy.rst, "Neuron extension
#: components Versioning") by the framework version plus the Neuron major.minor (2.9.0.2.15.32035 -> 2.9.0.2.15).
FRAMEWORK_KEY_PARTS: dict[str, int] = {
    NEURONX_CC: 2, NEURON_CC: 2, TORCH_NEURONX: 5, TORCH_NEURON: 5, TENSORFLOW_NEURON: 5,
}

#: The Neuron driver supports kernels 5.10 and later (driver 2.18 and later, every row below).
KERNEL_MIN = "5.10"
_SRC_KERNEL_MIN = (
    "SDK:about-neuron/announcements/neuron2.x/announce-no-support-al2.rst; "
    "SDK:release-notes/prev/content.rst (Supported Linux Kernel Versions)"
)
#: aws-neuronx-runtime-lib 2.23 (Neuron SDK 2.21.0) "Removed INF1 Support from Runtime library".
INF1_RUNTIME_REMOVED = "2.23"
_SRC_INF1_RUNTIME = (
    "SDK:release-notes/components/runtime.rst (Neuron 2.21.0, Breaking Changes); aws-neuron/aws-neuron-sdk#1071"
)

_SRC_RUNTIME_RN = "SDK:release-notes/components/runtime.rst"
_SRC_MANIFEST = "SDK:src/helperscripts/n2-manifest.json"
_SRC_RULE = "SDK:neuron-runtime/nrt-troubleshoot.rst (compatibility id: the driver stays backwards compatible)"
_SRC_NEFF = (
    "SDK@8862125f279f:release-notes/runtime/aws-neuronx-runtime-lib/index.rst (NEFF Support Table: 0.6 all, "
    "1.0 >= 1.0.6905.0, 2.0 >= 1.6.5.0); SDK:neuron-runtime/nrt-troubleshoot.rst (Unsupported NEFF Version)"
)
_SRC_COMPILE_RULE = (
    "SDK:about-neuron/sdk-policy.rst (minor releases are backwards compatible); "
    "SDK:neuron-runtime/nrt-troubleshoot.rst (Unsupported NEFF Version, Unsupported Hardware Operator Code)"
)
_NEFF_ALL = ("0.6", "1.0", "2.0")


@dataclass(frozen=True)
class KernelBreak:
    """Kernels from ``kernel`` (major.minor) on need a driver with the fix: ``fixed_in`` holds the first fixed
    version of each driver line that got it (a later line has it from the newest of them on)."""

    kernel: str
    fixed_in: tuple[str, ...]
    what: str
    source: str


#: Known kernel -> driver breaks (aws-neuron/aws-neuron-sdk#945 and #843: old drivers do not build on 6.5).
KERNEL_BREAKS: tuple[KernelBreak, ...] = (
    KernelBreak(
        "6.3", ("2.17.17.0",), "the Linux 6.3/6.4 API changes break older drivers",
        "SDK@8862125f279f:release-notes/runtime/aws-neuronx-dkms/index.rst (2.16.7.0: installation issues on "
        "6.3 and 6.4; 2.17.17.0: compatibility issues for 6.3); aws-neuron/aws-neuron-sdk#843; "
        "aws-neuron/aws-neuron-sdk#945",
    ),
    KernelBreak(
        "6.13", ("2.24.7.0",), "older drivers fail to build on Linux 6.13+",
        "SDK:release-notes/prev/2.26.0/runtime.rst (Neuron Driver 2.24.7.0)",
    ),
    KernelBreak(
        "6.18", ("2.24.13.0", "2.26.10.0"), "older drivers are not compatible with Linux 6.18",
        "SDK:release-notes/prev/2.26.0/runtime.rst (Neuron Driver 2.24.13.0, the Inf1 patch); "
        "SDK:release-notes/components/runtime.rst (Neuron 2.28.0, Neuron Driver 2.26.10.0); "
        "SDK:release-notes/prev/2.28.1.rst",
    ),
)

#: Runtime compatibility ids a driver accepts, per architecture (the runtime refuses to start outside the range:
#: "This Neuron Runtime (compatibility id: X) is not compatible with the installed aws-neuron-dkms package",
#: aws-neuron/aws-neuron-sdk#655). The ids only grow: "MIN should be incremented when we make changes in the
#: driver that are not compatible with old RT" (DRV:v2/neuron_dhal_v2.c). Only 2.24.7.0's sources are public.
DRIVER_COMPAT_IDS: dict[str, dict[str, tuple[int, int]]] = {
    "2.24.7.0": {"inf1": (2, 7), "inf2": (5, 7), "trn1": (5, 7), "trn2": (10, 11)},
}
_SRC_COMPAT_IDS = (
    "DRV:v1/neuron_dhal_v1.c (V1_RT_MIN/MAX_COMPATIBLE_VERSION); DRV:v2/neuron_dhal_v2.c; "
    "DRV:v3/neuron_dhal_v3.c; DRV:neuron_pci.c (inf2, trn1 -> V2; trn2 -> V3; else V1); "
    "aws-neuron/aws-neuron-sdk#655"
)


@dataclass(frozen=True)
class ReleaseChain:
    """One Neuron SDK release: every link of the chain, each with its source in :attr:`sources`.

    ``driver``/``runtime`` are the release's ``aws-neuronx-dkms``/``aws-neuronx-runtime-lib`` (the same strings
    as :data:`NEURON_RELEASES` where it has them). ``kernels_tested``: the kernel series (major.minor) the driver
    was tested on; empty where Neuron published none (the source says so). ``runtime_min_driver``: the oldest
    driver the runtime runs on; ``driver_min_runtime``: the oldest runtime this release's driver still starts
    (None: no such limit published). ``neff_versions``: NEFF format versions the runtime loads. ``compilers``
    and ``frameworks``: the compiler and framework package versions the release ships. ``inf1``: what of the
    release still supports Inf1 (``driver``, ``dlami``, ``frameworks``).
    """

    sdk: str
    date: str
    driver: str
    runtime: str
    kernels_tested: tuple[str, ...]
    runtime_min_driver: str
    driver_min_runtime: str | None
    neff_versions: tuple[str, ...]
    compilers: dict[str, str] = field(hash=False)
    frameworks: dict[str, tuple[str, ...]] = field(hash=False)
    inf1: frozenset[str]
    sources: dict[str, str] = field(hash=False)


#: Neuron SDK release -> its chain, newest first, the same releases as :data:`NEURON_RELEASES`. Adding a
#: release is one entry here (and its versions in NEURON_RELEASES); docs/compatibility.md "Extending".
#: Package versions: SDK:src/helperscripts/n2-manifest.json ("neuron_releases"), which for some releases names a
#: later build than the release notes (2.28.0 runtime 2.30.51.0, notes 2.30.50.0; 2.26.0 runtime 2.28.23.0,
#: notes 2.28.19.0: the same runtime series, and the strings below are NEURON_RELEASES').
CHAIN: dict[str, ReleaseChain] = {
    "2.32.0": ReleaseChain(
        sdk="2.32.0", date="2026-08-17", driver="2.30.2.0", runtime="2.34.10.0",
        kernels_tested=("5.10", "5.14", "6.1", "6.8", "6.12", "6.17", "6.18"),
        runtime_min_driver="2.30.2.0", driver_min_runtime=None, neff_versions=_NEFF_ALL,
        compilers={NEURONX_CC: "2.27.5334.0", NEURON_CC: "1.24.0.0"},
        frameworks={TORCH_NEURONX: ("2.9.0.2.15.32035",), TORCH_NEURON: ("1.13.1.2.11.13.0",)},
        inf1=frozenset({"frameworks"}),
        sources={
            KERNEL_DRIVER: f"{_SRC_RUNTIME_RN} (Neuron 2.32.0, Neuron Driver 2.30.2, Compatibility Support Table)",
            DRIVER_RUNTIME: f"{_SRC_RUNTIME_RN} (Neuron 2.32.0: runtime 2.34.10, driver 2.30.2); {_SRC_RULE}",
            RUNTIME_MODEL: f"{_SRC_MANIFEST} (2.32.0: neuronx-cc 2.27.5334.0, neuron-cc 1.24.0.0); {_SRC_NEFF}",
            FRAMEWORK_RUNTIME: (
                f"{_SRC_MANIFEST} (2.32.0: torch-neuron; no torch-neuronx); SDK:setup/pytorch/manual.rst "
                "(torch-neuronx pinned to the Neuron 2.31 build as XLA support ended with that release)"
            ),
            INF1: (
                "SDK:about-neuron/announcements/neuron2.x/announce-correction-neuron-driver-support-inf1.rst; "
                "SDK:deploy/environments/dlami.rst (no Inf1 DLAMIs since 2.26.1)"
            ),
        },
    ),
    "2.31.0": ReleaseChain(
        sdk="2.31.0", date="2026-07-07", driver="2.29", runtime="2.33",
        kernels_tested=("5.10", "5.14", "6.1", "6.8", "6.12", "6.17", "6.18"),
        runtime_min_driver="2.29", driver_min_runtime="2.33", neff_versions=_NEFF_ALL,
        compilers={NEURONX_CC: "2.26.6360.0", NEURON_CC: "1.24.0.0"},
        frameworks={TORCH_NEURONX: ("2.9.0.2.15.32035",), TORCH_NEURON: ("1.13.1.2.11.13.0",)},
        inf1=frozenset({"frameworks"}),
        sources={
            KERNEL_DRIVER: f"{_SRC_RUNTIME_RN} (Neuron 2.31.0, Neuron Driver 2.29, Compatibility Support Table)",
            DRIVER_RUNTIME: (
                f"{_SRC_RUNTIME_RN} (Neuron 2.31.0: runtime 2.33, driver 2.29; Known Issues: Neuron Driver 2.29 "
                f"requires Neuron Runtime Library 2.33 or later); {_SRC_MANIFEST} (2.29.0.0, 2.33.10.0); {_SRC_RULE}"
            ),
            RUNTIME_MODEL: f"{_SRC_MANIFEST} (2.31.0: neuronx-cc 2.26.6360.0, neuron-cc 1.24.0.0); {_SRC_NEFF}",
            FRAMEWORK_RUNTIME: f"{_SRC_MANIFEST} (2.31.0: torch-neuronx, torch-neuron)",
            INF1: "SDK:about-neuron/announcements/neuron2.x/announce-correction-neuron-driver-support-inf1.rst",
        },
    ),
    "2.30.0": ReleaseChain(
        sdk="2.30.0", date="2026-05-21", driver="2.28.0.0", runtime="2.32.31.0",
        kernels_tested=("5.10", "5.14", "6.1", "6.8", "6.12", "6.17"),
        runtime_min_driver="2.28.0.0", driver_min_runtime=None, neff_versions=_NEFF_ALL,
        compilers={NEURONX_CC: "2.25.3371.0", NEURON_CC: "1.24.0.0"},
        frameworks={TORCH_NEURONX: ("2.9.0.2.14.27725",), TORCH_NEURON: ("1.13.1.2.11.13.0",)},
        inf1=frozenset({"frameworks"}),
        sources={
            KERNEL_DRIVER: f"{_SRC_RUNTIME_RN} (Neuron 2.30.0, Neuron Driver 2.28.0.0, Compatibility Support Table)",
            DRIVER_RUNTIME: (
                f"{_SRC_RUNTIME_RN} (Neuron 2.30.0 Known Issues: Runtime Library 2.32 is not backward-compatible "
                "with Neuron Driver 2.26 or earlier); SDK:release-notes/components/containers.rst (2.30.0); "
                f"{_SRC_RULE}"
            ),
            RUNTIME_MODEL: f"{_SRC_MANIFEST} (2.30.0: neuronx-cc 2.25.3371.0, neuron-cc 1.24.0.0); {_SRC_NEFF}",
            FRAMEWORK_RUNTIME: f"{_SRC_MANIFEST} (2.30.0: torch-neuronx, torch-neuron)",
            INF1: "SDK:about-neuron/announcements/neuron2.x/announce-correction-neuron-driver-support-inf1.rst",
        },
    ),
    "2.29.0": ReleaseChain(
        sdk="2.29.0", date="2026-04-09", driver="2.27.4.0", runtime="2.31.24.0",
        kernels_tested=("5.10", "5.14", "6.1", "6.8", "6.12", "6.17"),
        runtime_min_driver="2.27.4.0", driver_min_runtime=None, neff_versions=_NEFF_ALL,
        compilers={NEURONX_CC: "2.24.5133.0", NEURON_CC: "1.24.0.0"},
        frameworks={TORCH_NEURONX: ("2.9.0.2.13.24727",), TORCH_NEURON: ("1.13.1.2.11.13.0",)},
        inf1=frozenset({"frameworks"}),
        sources={
            KERNEL_DRIVER: f"{_SRC_RUNTIME_RN} (Neuron 2.29.0, Neuron Driver 2.27.4.0, Compatibility Support Table)",
            DRIVER_RUNTIME: f"{_SRC_RUNTIME_RN} (Neuron 2.29.0: runtime 2.31.24.0, driver 2.27.4.0); {_SRC_RULE}",
            RUNTIME_MODEL: f"{_SRC_MANIFEST} (2.29.0: neuronx-cc 2.24.5133.0, neuron-cc 1.24.0.0); {_SRC_NEFF}",
            FRAMEWORK_RUNTIME: f"{_SRC_MANIFEST} (2.29.0: torch-neuronx, torch-neuron)",
            INF1: "SDK:about-neuron/announcements/neuron2.x/announce-correction-neuron-driver-support-inf1.rst",
        },
    ),
    "2.28.0": ReleaseChain(
        sdk="2.28.0", date="2026-02-26", driver="2.26.5.0", runtime="2.30.50.0",
        kernels_tested=("5.10", "5.14", "6.1", "6.8", "6.12", "6.14"),
        runtime_min_driver="2.26.5.0", driver_min_runtime=None, neff_versions=_NEFF_ALL,
        compilers={NEURONX_CC: "2.23.6484.0", NEURON_CC: "1.24.0.0"},
        frameworks={
            TORCH_NEURONX: ("2.7.0.2.12.22436", "2.8.0.2.12.22436", "2.9.0.2.12.22436"),
            TORCH_NEURON: ("1.13.1.2.11.13.0",),
            TENSORFLOW_NEURON: ("2.10.1.2.12.2.0",),
        },
        inf1=frozenset({"frameworks"}),
        sources={
            KERNEL_DRIVER: f"{_SRC_RUNTIME_RN} (Neuron 2.28.0, Neuron Driver 2.26.5.0, Compatibility Support Table)",
            DRIVER_RUNTIME: f"{_SRC_RUNTIME_RN} (Neuron 2.28.0: runtime 2.30.50.0, driver 2.26.5.0); {_SRC_RULE}",
            RUNTIME_MODEL: f"{_SRC_MANIFEST} (2.28.0: neuronx-cc 2.23.6484.0, neuron-cc 1.24.0.0); {_SRC_NEFF}",
            FRAMEWORK_RUNTIME: f"{_SRC_MANIFEST} (2.28.0: torch-neuronx, torch-neuron, tensorflow-neuron)",
            INF1: "SDK:about-neuron/announcements/neuron2.x/announce-correction-neuron-driver-support-inf1.rst",
        },
    ),
    "2.26.0": ReleaseChain(
        sdk="2.26.0", date="2025-09-18", driver="2.24.7.0", runtime="2.28.19.0",
        kernels_tested=(),
        runtime_min_driver="2.24.7.0", driver_min_runtime=None, neff_versions=_NEFF_ALL,
        compilers={NEURONX_CC: "2.21.18209.0", NEURON_CC: "1.24.0.0"},
        frameworks={
            TORCH_NEURONX: ("2.6.0.2.10.13553", "2.7.0.2.10.13553", "2.8.0.2.10.13553"),
            TORCH_NEURON: ("1.13.1.2.11.13.0",),
            TENSORFLOW_NEURON: ("2.10.1.2.12.2.0",),
        },
        inf1=frozenset({"driver", "dlami", "frameworks"}),
        sources={
            KERNEL_DRIVER: (
                "SDK:release-notes/prev/2.26.0/runtime.rst (driver 2.24.7.0; its Compatibility Support Table is "
                "not published: kernels tested unknown)"
            ),
            DRIVER_RUNTIME: (
                f"SDK:release-notes/prev/2.26.0/runtime.rst (runtime 2.28.19.0, driver 2.24.7.0); {_SRC_RULE}"
            ),
            RUNTIME_MODEL: f"{_SRC_MANIFEST} (2.26.0: neuronx-cc 2.21.18209.0, neuron-cc 1.24.0.0); {_SRC_NEFF}",
            FRAMEWORK_RUNTIME: f"{_SRC_MANIFEST} (2.26.0: torch-neuronx, torch-neuron, tensorflow-neuron)",
            INF1: (
                "SDK:about-neuron/announcements/neuron2.x/announce-correction-neuron-driver-support-inf1.rst "
                "(2.24 is the last Inf1 driver); SDK:deploy/environments/dlami.rst (Inf1 DLAMIs up to SDK 2.26)"
            ),
        },
    ),
    "2.21.0": ReleaseChain(
        sdk="2.21.0", date="2024-12-20", driver="2.19.64.0", runtime="2.23.110",
        kernels_tested=(),
        runtime_min_driver="2.19.64.0", driver_min_runtime=None, neff_versions=_NEFF_ALL,
        compilers={NEURONX_CC: "2.16.345.0", NEURON_CC: "1.24.0.0"},
        frameworks={
            TORCH_NEURONX: ("1.13.1.1.17.0", "2.1.2.2.4.0", "2.5.1.2.4.0"),
            TORCH_NEURON: ("1.10.2.2.11.13.0", "1.11.0.2.11.13.0", "1.12.1.2.11.13.0", "1.13.1.2.11.13.0"),
            TENSORFLOW_NEURON: ("2.8.4.2.12.2.0", "2.9.3.2.12.2.0", "2.10.1.2.12.2.0"),
        },
        inf1=frozenset({"driver", "dlami", "frameworks"}),
        sources={
            KERNEL_DRIVER: (
                f"{_SRC_MANIFEST} (2.21.0: aws-neuronx-dkms 2.19.64.0; the release notes name no driver and "
                "no Compatibility Support Table: kernels tested unknown)"
            ),
            DRIVER_RUNTIME: (
                f"{_SRC_RUNTIME_RN} (Neuron 2.21.0: runtime 2.23.110.0 / 2.23.112.0); {_SRC_MANIFEST} "
                f"(2.21.0: aws-neuronx-dkms 2.19.64.0); {_SRC_RULE}"
            ),
            RUNTIME_MODEL: f"{_SRC_MANIFEST} (2.21.0: neuronx-cc 2.16.345.0, neuron-cc 1.24.0.0); {_SRC_NEFF}",
            FRAMEWORK_RUNTIME: (
                f"{_SRC_MANIFEST} (2.21.0: torch-neuronx, torch-neuron, tensorflow-neuron); {_SRC_INF1_RUNTIME}"
            ),
            INF1: f"{_SRC_INF1_RUNTIME}; SDK:deploy/environments/dlami.rst (Inf1 DLAMIs up to SDK 2.26)",
        },
    ),
}


@dataclass(frozen=True)
class GpuChain:
    """One NGC Triton release (``nvcr.io/nvidia/tritonserver:<ngc>-py3``): its CUDA, the NVIDIA driver branch
    it needs (``min_driver``), and on data center GPUs the older branches its CUDA forward-compatibility package
    supports (``datacenter_compat``, each the lowest version of its branch; None: not confirmed). ``disputed``:
    branches the release notes both allow and ask to upgrade from (reported as warnings)."""

    ngc: str
    cuda: str
    min_driver: str
    datacenter_compat: tuple[str, ...] | None
    disputed: tuple[str, ...]
    sources: dict[str, str] = field(hash=False)


_NGC_NOTES = (
    "https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/rel-{}.html (Driver Requirements)"
)
_DISPUTED_545 = (
    " (lists R545 as forward-compatible on data center GPUs and among the drivers to upgrade from, "
    "'not forward-compatible with CUDA 12.6')"
)

#: NGC Triton release -> its GPU chain, from each release's notes ("Driver Requirements"). 24.10 is the
#: project's default (Triton 2.51, roles/triton.py). Left out, not confirmed: 25.01 and 25.03 (their notes ask
#: for driver 560 with CUDA 12.8) and 25.08/25.10 (CUDA 13.0 with driver 575); their driver paragraphs repeat
#: 24.x text ("not forward-compatible with CUDA 12.6").
NGC_TRITON: dict[str, GpuChain] = {
    "25.06": GpuChain(
        ngc="25.06", cuda="12.9.1", min_driver="575", datacenter_compat=None, disputed=(),
        sources={GPU_DRIVER_IMAGE: _NGC_NOTES.format("25-06") + " (its data center list repeats the 24.x "
                 "text, not confirmed for CUDA 12.9)"},
    ),
    "24.12": GpuChain(
        ngc="24.12", cuda="12.6.3", min_driver="560", datacenter_compat=("470.57", "525.85", "535.86"),
        disputed=("545.23",),
        sources={GPU_DRIVER_IMAGE: _NGC_NOTES.format("24-12") + _DISPUTED_545 + "; triton-inference-server/server"
                 "@38520f6d0:docs/introduction/release_notes.md"},
    ),
    "24.10": GpuChain(
        ngc="24.10", cuda="12.6.2", min_driver="560", datacenter_compat=("470.57", "525.85", "535.86"),
        disputed=("545.23",),
        sources={GPU_DRIVER_IMAGE: _NGC_NOTES.format("24-10") + _DISPUTED_545 + "; triton-inference-server/server"
                 "@0194c3da9:docs/introduction/release_notes.md"},
    ),
    "24.08": GpuChain(
        ngc="24.08", cuda="12.6", min_driver="560", datacenter_compat=("470.57", "525.85", "535.86"),
        disputed=("545.23",),
        sources={GPU_DRIVER_IMAGE: _NGC_NOTES.format("24-08") + _DISPUTED_545},
    ),
    "24.04": GpuChain(
        ngc="24.04", cuda="12.4", min_driver="545", datacenter_compat=("470.57", "525.85", "535.86", "545.23"),
        disputed=(),
        sources={GPU_DRIVER_IMAGE: _NGC_NOTES.format("24-04")},
    ),
}
