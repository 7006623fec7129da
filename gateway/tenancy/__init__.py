"""Who is calling: API keys (`keys`: format, hashing, stores), authentication (`auth`), the admin
API (`admin`, which loads FastAPI) and `llmgw keys` (`keys_cli`). Names are imported from their modules
(no package facade, docs/design/018-layout.md).
"""
