// placeholder: written in issue 4
