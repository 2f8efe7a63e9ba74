"""Pure parsers of what the fabric tools print: nccl-tests (text and -J JSON), fi_pingpong,
fi_info and nvidia-smi. No I/O; each raises only ``tasks.errors.ParseError`` on input it cannot
read, and each result has a ``to_json`` twin for `pdlift fabric parse ... --json`.
"""

from tasks.parsing.fi_info import FiInfoEntry, FiInfoResult, parse_fi_info
from tasks.parsing.nccl_json import parse_nccl_json, with_log
from tasks.parsing.nccl_log import scan_log
from tasks.parsing.nccl_model import (
    FatalError, IncompleteRow, Measurement, NcclConfig, NcclResult, NcclRow, NetEvidence, RankInfo,
    busbw_at,
)
from tasks.parsing.nccl_tests import parse_nccl_tests, parse_nccl_text
from tasks.parsing.nvidia_smi import GpuInfo, GpuInventory, parse_nvidia_smi
from tasks.parsing.pingpong import PingpongResult, PingpongRow, PingpongTable, parse_pingpong

__all__ = [
    "FatalError", "FiInfoEntry", "FiInfoResult", "GpuInfo", "GpuInventory", "IncompleteRow",
    "Measurement", "NcclConfig", "NcclResult", "NcclRow", "NetEvidence", "PingpongResult",
    "PingpongRow", "PingpongTable", "RankInfo", "busbw_at", "parse_fi_info", "parse_nccl_json",
    "parse_nccl_tests", "parse_nccl_text", "parse_nvidia_smi", "parse_pingpong", "scan_log",
    "with_log",
]
