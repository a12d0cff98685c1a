"""What the tests share: project copies and the command runner (`project`), the plain-Python
oracles of the customers entity (`oracles`), and the multi-File DMS scenario with its oracles
(`scenario`). Test modules import from here, never from each other."""
