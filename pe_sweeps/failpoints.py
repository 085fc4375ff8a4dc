"""Named points where the fault tests kill a sweep process (tests/sweep/test_faults.py): the windows between two
writes that must look atomic to the next process. `PE_FAULT_AT=NAME` (layout.FAULT_ENV) SIGKILLs this
process the first time it reaches `failpoint(NAME)`, `PE_FAULT_AT=NAME@stop` freezes it there (SIGSTOP: a
test then kills the processes around it); unset, a failpoint costs one dictionary lookup."""

import os
import signal

from pe_sweeps.layout import FAULT_ENV


def failpoint(name: str) -> None:
    wanted = os.environ.get(FAULT_ENV)
    if wanted == name:
        os.kill(os.getpid(), signal.SIGKILL)
    elif wanted == f"{name}@stop":
        os.kill(os.getpid(), signal.SIGSTOP)
