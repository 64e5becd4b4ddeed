"""zlf extension ``cupti``: kernel time from CUPTI activity records, offered as a kernel-activity timer."""
