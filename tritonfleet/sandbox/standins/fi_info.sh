#!/bin/sh
# SANDBOX STAND-IN for libfabric's fi_info from the EFA installer (tritonfleet sandbox).
# The sandbox has no EFA devices, so the efa provider is never available.
provider=""
while [ $# -gt 0 ]; do
    case "$1" in
        -p|--provider) provider="$2"; shift ;;
        -p*) provider="${1#-p}" ;;
        --version) echo "fi_info: 1.22.0amzn4.0 (tritonfleet sandbox stand-in)"; echo "libfabric: 1.22.0amzn4.0"; echo "libfabric api: 1.22"; exit 0 ;;
    esac
    shift
done
if [ -n "$provider" ] && [ "$provider" != tcp ]; then
    echo "fi_getinfo: -61 (No data available)"
    exit 1
fi
printf 'provider: tcp\n    fabric: 192.168.250.0/24\n    domain: eth0\n    version: 1.0\n    type: FI_EP_MSG\n    protocol: FI_PROTO_SOCK_TCP\n'
