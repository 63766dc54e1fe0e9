LABEL ${labels}
