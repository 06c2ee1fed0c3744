"""Remove scheduled QA from every host (timer, service, script and textfile metric):

    make qa-unschedule INVENTORY=inventories/inf2.py
"""

from roles.preflight import preflight
from roles.qa import qa_unschedule

preflight()
qa_unschedule()
