"""`python cli.py ...`: the project's command line from a source checkout, the same as `pe-sweeps ...` once
installed (pe_sweeps/cli.py holds it)."""

from pe_sweeps.entry import main

if __name__ == "__main__":
    main()
