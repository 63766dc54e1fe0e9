ENV ${env}
