"""Where a request goes: routes (an alias on a pool), the alias -> route table and a routed alias's
decision (`table`), routed aliases' policies and models (`aliases`), and the cascade runner.
"""
