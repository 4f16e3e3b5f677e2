"""``python -m hopattn``: the build's facts and its support matrix, in Markdown."""

import hopattn

print(f"hopattn {hopattn.__version__}, GPU kernels built: {hopattn.built_with_cuda()}\n")
print(hopattn.format_support_matrix())
