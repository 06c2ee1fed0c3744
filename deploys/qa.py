"""Run the QA suites on every host now, in parallel, and fetch the reports:

    pyinfra inventories/inf2.py deploys/qa.py            # or: make qa INVENTORY=inventories/inf2.py

preflight -> agent (with the QA runner) -> qa (suites uploaded, run against the host's servers, reports
fetched to qa_reports_dir/<host>/<UTC stamp>.{json,xml}, one fleet table; fails when any host failed).
"""

from roles.agent import agent
from roles.preflight import preflight
from roles.qa import qa

preflight()
agent()
qa()
