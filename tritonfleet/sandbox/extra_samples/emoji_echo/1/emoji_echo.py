"""Sample python-backend model of the sandbox that needs a package the plain image lacks:
OUTPUT0 = emoji.emojize(INPUT0) (b":thumbs_up:" -> "👍" in UTF-8).

``emoji`` is imported at module level, so on an image without it the load fails with Triton's
"No module named 'emoji'"; an image built with ``triton_python_requirements = ["emoji==2.14.0"]`` (the
sandbox's PyPI index serves it) serves the model. Not part of the seeded sample repository. This file is
``emoji_echo.py`` (the config's ``default_model_filename``), not ``model.py``: mypy, which checks the tree,
would take two ``model.py`` files (add_sub's) for one module."""

import emoji  # type: ignore[import-not-found,unused-ignore]
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = np.array(
                [[emoji.emojize(t.decode("utf-8")).encode("utf-8") for t in row] for row in text], dtype=np.object_
            )
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", out)]))
        return responses
