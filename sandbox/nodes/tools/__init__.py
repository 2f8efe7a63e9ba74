"""Executables of the sandbox GPU nodes (system python3, standard library only).

The node manager puts a wrapper per tool in each node's bin dir (its sshd `SetEnv PATH`):
nvidia-smi -> nvidia_smi.py, fi_info -> fi_info.py, fi_pingpong -> fi_pingpong.py,
mpirun -> mpirun.py, all_reduce_perf / alltoall_perf / sendrecv_perf -> nccl_tests.py.
The tools import each other as top-level modules (their directory is sys.path[0]).
"""
