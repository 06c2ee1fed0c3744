"""Read a TensorFlow SavedModel signature into tensor specs (only when tensorflow is installed)."""

from __future__ import annotations

from tritonfleet.genmodel.spec import SpecError, TensorSpec

# tf.DType.name -> Triton suffix (the types upstream accepts).
_TF_TO_TRITON = {
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "bool": "BOOL",
    "string": "STRING",
}


def read_signature(
    saved_model_dir: str, tag_set: str, signature_def_key: str
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    try:
        import tensorflow as tf
        from tensorflow.python.tools import saved_model_utils
    except ImportError:
        raise SpecError(
            "--model_type tensorflow without --triton_input/--triton_output reads the SavedModel "
            "signature, which needs tensorflow installed; give the tensors explicitly instead"
        ) from None
    try:
        meta = saved_model_utils.get_meta_graph_def(saved_model_dir, tag_set)
    except Exception as exc:
        raise SpecError(
            f"--compiled_model {saved_model_dir}: cannot read tag set {tag_set!r}: {exc}"
        ) from None
    if signature_def_key not in meta.signature_def:
        raise SpecError(
            f"--signature_def_key {signature_def_key!r} not in {saved_model_dir} "
            f"(has {', '.join(sorted(meta.signature_def)) or 'none'})"
        )
    sig = meta.signature_def[signature_def_key]

    def convert(items: object) -> tuple[TensorSpec, ...]:
        specs = []
        for info in items.values():  # type: ignore[attr-defined]
            name = tf.as_dtype(info.dtype).name
            if name not in _TF_TO_TRITON:
                raise SpecError(f"SavedModel tensor {info.name}: data type {name} has no Triton equivalent")
            dims = tuple(d.size if d.size > 0 else -1 for d in info.tensor_shape.dim)
            specs.append(TensorSpec(name=info.name, dtype=_TF_TO_TRITON[name], dims=dims or (1,)))
        return tuple(specs)

    return convert(sig.inputs), convert(sig.outputs)
