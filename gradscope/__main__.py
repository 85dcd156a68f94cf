"""``python -m gradscope ...`` runs the same CLI as the ``gradscope`` script."""
from gradscope.cli import main

if __name__ == "__main__":
    main()
