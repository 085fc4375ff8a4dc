"""`python -m pe_sweeps ...` = `pe-sweeps ...` = `python cli.py ...` (pe_sweeps/cli.py)."""

from pe_sweeps.entry import main

if __name__ == "__main__":
    main()
