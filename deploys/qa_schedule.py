"""Install scheduled QA on every host (a systemd timer running the suites, reports to S3, a textfile metric):

    make qa-schedule INVENTORY=inventories/inf2.py        # qa_schedule, qa_reports_s3_uri from data
"""

from roles.agent import agent
from roles.preflight import preflight
from roles.qa import qa_schedule

preflight()
agent()
qa_schedule()
