"""The pages parallax renders for people: report.html, report.md and the suite history page."""
