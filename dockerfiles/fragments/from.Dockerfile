
# ---- stage ${stage}: ${why}
FROM ${image} AS ${stage}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
